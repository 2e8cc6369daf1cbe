"""Engine snapshots (the processor's state changelog on Apache Kafka): a restored engine goes on exactly as the one
it was taken from, and the snapshot reader builds nothing but engine state."""

from __future__ import annotations

import asyncio
import os
import pickle
import zlib
from pathlib import Path

import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ClusterEvent, Tick, dumps, stable_id
from kai_stream.core.manifests import load_scenario
from kai_stream.streams import snapshots
from kai_stream.streams.engine import PartitionEngine

ROOT = Path(__file__).resolve().parents[2]


def _events() -> list[ClusterEvent]:
    events: list[ClusterEvent] = list(load_scenario((ROOT / "examples" / "reclaim.yaml").read_text()))
    return [*events, Tick(event_id=stable_id("tick", "5"), ts=5.0, pool="default")]


def test_a_restored_engine_decides_as_the_engine_it_was_taken_from() -> None:
    events = _events()
    half = len(events) // 2
    engine = PartitionEngine.for_config(0, SchedulerConfig(), "test")
    for offset, event in enumerate(events[:half]):
        engine.fold(offset, event)
    first = engine.cycle(sorted(engine.pools))
    restored = snapshots.decode(snapshots.encode(snapshots.Snapshot(engine, decisions_from=17)))
    assert restored.decisions_from == 17
    assert restored.engine.offset == engine.offset == half - 1
    assert restored.engine.config_recorded == engine.config_recorded and first

    def rest(e: PartitionEngine) -> list[bytes]:
        for offset, event in enumerate(events[half:], start=half):
            e.fold(offset, event)
        return [dumps(item.record) for item in e.cycle(sorted(e.pools))]

    expected = rest(engine)
    assert expected  # the rest of the log makes decisions
    assert rest(restored.engine) == expected


async def test_a_snapshot_encoded_aside_is_the_engine_as_it_was_when_asked() -> None:
    engine = PartitionEngine.for_config(0, SchedulerConfig(), "test")
    for offset, event in enumerate(_events()):
        engine.fold(offset, event)
    encoding = asyncio.ensure_future(snapshots.encode_aside(snapshots.Snapshot(engine, decisions_from=3)))
    await asyncio.sleep(0)  # the child is forked: what the engine does next is not in its copy
    before = engine.offset
    engine.fold(before + 1, Tick(event_id=stable_id("tick", "9"), ts=9.0, pool="default"))
    value = await encoding
    assert value == snapshots.encode(snapshots.Snapshot(_engine_at(before), decisions_from=3))
    assert snapshots.decode(value).engine.offset == before != engine.offset


def _engine_at(offset: int) -> PartitionEngine:
    engine = PartitionEngine.for_config(0, SchedulerConfig(), "test")
    for at, event in enumerate(_events()[: offset + 1]):
        engine.fold(at, event)
    return engine


class _Exploit:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("true",))


@pytest.mark.parametrize("payload", [_Exploit(), {"not": "an engine"}])
def test_a_snapshot_holding_anything_but_an_engine_is_refused(payload: object) -> None:
    value = snapshots.encode(snapshots.Snapshot(PartitionEngine.for_config(0, SchedulerConfig(), "t"), 0))
    forged = value[:16] + zlib.compress(pickle.dumps(payload))
    with pytest.raises(pickle.UnpicklingError):
        snapshots.decode(forged)
