"""`kai-stream simulate --live SCENARIO --json` equals in-process `simulate` on every bundled example, byte for
byte: real broker over TCP (Tansu, and Apache Kafka), simulated cluster over HTTP, connector, faust processor, binder.

The whole JSON is compared, with no special case per scenario: pods (status, queue, node, GPU indices), queue
fair shares and allocations, and every decision with every field, including the log positions
(``input_offset``, ``decision_id``) and the audit chain (``prev_hash``). That holds because the in-process
simulate models the live cluster-events log (outcomes, the connector's observations, re-created pods) and the
live run decides in rounds (``Pipeline.run_rounds``), as the in-process one does: its processor cycles only on the
round-barrier Tick that opens each round, published once the log holds the previous round's whole reaction, so
no timing on a loaded machine can move a cycle.

The scenarios run concurrently (one CLI process each; on Tansu each with its own broker, on Kafka all on the
session's broker) to keep the suite fast.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import EvictionRequested, decision_hash, loads_decision
from kai_stream.core.manifests import load_scenario
from kai_stream.simulate import simulate
from tests.engines import EngineUnderTest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "examples").glob("*.yaml"))
CLI = [sys.executable, "-c", "from kai_stream.cli import main; main()"]


async def _simulate(scenario: Path, *extra: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        *CLI, "simulate", "--json", *extra, str(scenario),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 200)
    assert proc.returncode == 0, f"{scenario.name} {extra}: exit {proc.returncode}\n{err.decode()[-3000:]}"
    result: dict[str, Any] = orjson.loads(out)
    return result


def _chained(decisions: list[dict[str, Any]]) -> bool:
    heads: dict[str, str] = {}
    for raw in decisions:
        decision = loads_decision(orjson.dumps(raw))
        if decision.prev_hash != heads.get(decision.pool, ""):
            return False
        heads[decision.pool] = decision_hash(decision)
    return True


@pytest.mark.kafka
async def test_live_equals_in_process_for_every_example(engine: EngineUnderTest) -> None:
    assert len(SCENARIOS) >= 7
    # Tansu: each run starts its own broker; Kafka: every run shares the session's JVM (own topics and groups),
    # three at a time so that one broker is not asked for every scenario's group joins at once
    extra = ("--bootstrap-servers", engine.settings.bootstrap_servers) if engine.is_kafka else ()
    slots = asyncio.Semaphore(3 if engine.is_kafka else len(SCENARIOS))

    async def one(path: Path) -> dict[str, Any]:
        async with slots:
            return await _simulate(path, "--live", *extra)

    live = await asyncio.gather(*(one(path) for path in SCENARIOS))
    evicting = 0
    for path, got in zip(SCENARIOS, live, strict=True):
        in_process = simulate(load_scenario(path.read_text()), SchedulerConfig())
        expected: dict[str, Any] = orjson.loads(orjson.dumps(in_process.to_json(), option=orjson.OPT_SORT_KEYS))
        assert expected["decisions"], f"{path.name}: in-process simulate decided nothing"
        assert _chained(expected["decisions"]), f"{path.name}: broken hash chain"
        for part in ("pods", "queues", "decisions"):
            assert got[part] == expected[part], f"{path.name}: live {part} differ from in-process simulate"
        assert got == expected
        if any(isinstance(d, EvictionRequested) for d in in_process.decisions):
            assert len({d.input_offset for d in in_process.decisions}) >= 2, f"{path.name}: one round only"
            evicting += 1
    assert evicting >= 3, "the examples should include evicting scenarios (reclaim, preempt, consolidation)"


async def test_live_rejects_a_missing_scenario() -> None:
    proc = await asyncio.create_subprocess_exec(
        *CLI, "simulate", "--live", "--json", "missing.yaml",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert b"missing.yaml" in err
