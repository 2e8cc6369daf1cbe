"""`kai-stream run --duration 20` (what `make run` starts): the demo pipeline schedules, binds, stops cleanly;
its history (the embedded sink's Parquet archive) outlives it, and `kai-stream audit invariants` over that
history finds every promise kept."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from kai_stream.cli import main; main()"]


async def test_run_for_twenty_seconds_binds_pods_and_stops_cleanly(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        *CLI, "run", "--duration", "20", "--history", str(tmp_path / "history"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=ROOT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    text = out.decode()
    assert proc.returncode == 0, text[-3000:]
    assert "stopped cleanly" in text
    steps = ["starting the embedded broker", "creating topics", "starting the simulated cluster",
             "connector: listing the cluster", "starting the processor and the binder"]
    shown = [text.find(step) for step in steps]
    assert -1 not in shown and shown == sorted(shown), f"start-up progress is shown as it goes: {text[:1500]}"
    assert re.search(r"starting the processor and the binder … \(\d+ s\)", text), text[:1500]
    bound = re.search(r"BindRequested (\d+).*binding POSTs (\d+)", text)
    assert bound is not None, text[-3000:]
    decided, posts = int(bound.group(1)), int(bound.group(2))
    # the demo asks for more than 16 GPUs and re-submits finished pods: more binds than fit at once
    assert decided > 16 and posts > 16
    assert posts <= decided

    audit = await asyncio.create_subprocess_exec(
        *CLI, "audit", "invariants", str(tmp_path / "history"), "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
    )
    report_raw, err = await asyncio.wait_for(audit.communicate(), 120)
    assert report_raw, err.decode()[-2000:]
    report = orjson.loads(report_raw)
    assert audit.returncode == 0 and report["ok"], report.get("violation")
    assert report["decisions"] >= decided
    pods = report["pods"]
    assert pods.get("bound", 0) + pods.get("deleted", 0) >= 16, pods  # finished pods are deleted and re-submitted


@pytest.mark.kafka
async def test_run_secure_binds_pods_over_sasl_ssl_on_apache_kafka(tmp_path: Path) -> None:
    """`kai-stream run --engine kafka --secure`: the embedded Apache Kafka's client listener is SASL_SSL and every
    component (connector, processor process, binder, history sink) binds the demo's pods through it."""
    proc = await asyncio.create_subprocess_exec(
        *CLI, "run", "--engine", "kafka", "--secure", "--duration", "15", "--no-history",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=ROOT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    text = out.decode()
    assert proc.returncode == 0, text[-3000:]
    assert re.search(r"broker 127\.0\.0\.1:\d+ \(kafka, SASL_SSL\)", text), text[:2000]
    bound = re.search(r"BindRequested (\d+).*binding POSTs (\d+)", text)
    assert bound is not None and int(bound.group(2)) >= 16, text[-3000:]
    assert "stopped cleanly" in text
