"""A log recorded by the real pipeline (Tansu over TCP, simulated cluster over HTTP, connector, faust
processor, binder) replays identically, read from the broker and from the Parquet history the sink wrote;
its hash chain verifies."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson

from kai_stream.audit import verify_chain
from kai_stream.history.reader import ALL_TOPICS, read_broker, read_history
from kai_stream.history.sink import run_sink
from kai_stream.pipeline import Pipeline, PipelineOptions
from kai_stream.replay.testing import assert_replays_identically

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from kai_stream.cli import main; main()"]


async def _audit_invariants(*source: str) -> tuple[int, dict[str, Any]]:
    """`kai-stream audit invariants SOURCE --json` in its own process: exit code and report."""
    proc = await asyncio.create_subprocess_exec(
        *CLI, "audit", "invariants", *source, "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert out, err.decode()[-2000:]
    report: dict[str, object] = orjson.loads(out)
    return proc.returncode or 0, report


async def test_live_pipeline_log_replays_identically(broker: str, topic_prefix: str, tmp_path: Path) -> None:
    options = PipelineOptions(
        scenario=ROOT / "examples" / "fair-share.yaml",
        bootstrap_servers=broker,
        topic_prefix=topic_prefix,
        tick_interval_s=None,
    )
    async with Pipeline(options) as pipeline:
        await pipeline.wait_quiescent(timeout_s=90)
        assert pipeline.kafka is not None
        history = await read_broker(pipeline.kafka, pipeline.names)
        stop = asyncio.Event()
        sink = asyncio.create_task(
            run_sink(pipeline.kafka, tmp_path, ALL_TOPICS, stop, names=pipeline.names,
                     group_id=f"{topic_prefix}sink", segment_seconds=0.3, poll_ms=100)
        )
        for _ in range(100):
            await asyncio.sleep(0.2)
            segments = [list((tmp_path / topic).glob("*/*.parquet")) for topic in ("cluster-events", "decisions")]
            if all(segments) and read_history(tmp_path).decisions >= history.decisions:
                break
        stop.set()
        await asyncio.wait_for(sink, 30)
        live = await _audit_invariants("--bootstrap-servers", broker, "--topic-prefix", topic_prefix)
    from_dir = await _audit_invariants(str(tmp_path))
    for code, report in (live, from_dir):
        assert code == 0 and report["ok"], report.get("violation")
    assert from_dir[1]["records"] >= live[1]["records"] > history.decisions

    assert history.decisions > 0 and any(log.configs for log in history.pools.values())
    from_broker = assert_replays_identically(history)
    assert from_broker.identical == history.decisions
    from_parquet = assert_replays_identically(tmp_path)
    assert from_parquet.identical >= from_broker.identical
    for log in history.pools.values():
        assert verify_chain(log.decisions, offsets=log.decision_offsets).ok
