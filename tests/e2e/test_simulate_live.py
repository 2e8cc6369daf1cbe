"""`kai-stream simulate --live SCENARIO --json` against in-process `simulate`, for every bundled example: real
Tansu broker over TCP, simulated cluster over HTTP, connector, faust processor, binder.

Scenarios without evictions: the whole JSON is identical (pods, queues, every decision byte for byte).
Scenarios with evictions: the first cycle's decisions are identical, and so are pods and queues apart from
evicted pods; after an eviction the two emulations of the cluster differ (known gap, see the report):
in-process simulate numbers decisions as log offsets and keeps an evicted pod for re-placement, while
the live log holds the binder's PodEvicted plus the connector's PodRemoved and the simulated API deletes
the pod (no controller re-creates it).

The scenarios run concurrently (one CLI process each, each with its own broker) to keep the suite fast.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.manifests import load_scenario
from kai_stream.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "examples").glob("*.yaml"))
CLI = [sys.executable, "-c", "from kai_stream.cli import main; main()"]


async def _simulate(scenario: Path, *extra: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        *CLI, "simulate", "--json", *extra, str(scenario),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 150)
    assert proc.returncode == 0, f"{scenario.name} {extra}: exit {proc.returncode}\n{err.decode()[-3000:]}"
    result: dict[str, Any] = orjson.loads(out)
    return result


async def test_live_equals_in_process_for_every_example() -> None:
    assert len(SCENARIOS) >= 2
    live = await asyncio.gather(*(_simulate(path, "--live") for path in SCENARIOS))
    exact = 0
    for path, got in zip(SCENARIOS, live, strict=True):
        in_process = simulate(load_scenario(path.read_text()), SchedulerConfig()).to_json()
        expected: dict[str, Any] = orjson.loads(orjson.dumps(in_process, option=orjson.OPT_SORT_KEYS))
        assert expected["decisions"], f"{path.name}: in-process simulate decided nothing"
        evicted = {f"{d['namespace']}/{d['name']}" for d in expected["decisions"] if d["type"] == "EvictionRequested"}
        if not evicted:
            assert got == expected, f"{path.name}: live result differs from in-process simulate"
            exact += 1
            continue
        first = expected["decisions"][0]["input_offset"]
        assert [d for d in got["decisions"] if d["input_offset"] == first] == [
            d for d in expected["decisions"] if d["input_offset"] == first
        ], f"{path.name}: first cycle differs"
        for key, pod in expected["pods"].items():
            if key not in evicted:
                assert got["pods"][key] == pod, f"{path.name}: {key}"
    assert exact >= 2


async def test_live_rejects_a_missing_scenario() -> None:
    proc = await asyncio.create_subprocess_exec(
        *CLI, "simulate", "--live", "--json", "missing.yaml",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert b"missing.yaml" in err
