"""A partition assigned with ``ahead`` is rebuilt at once, before its first record is delivered, and that state is
used when the record comes only if it has folded everything before it (records an earlier owner consumed are not
delivered again); otherwise the partition is rebuilt then, as without ``ahead``. The partitions built ahead
together are read by one consumer, and the malformed records they hold are dead-lettered off the build's path. A
partition revoked while it is being built ahead is dropped, build and all."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ClusterEvent, Model, dumps
from kai_stream.core.manifests import load_scenario
from kai_stream.core.state import ClusterState, apply
from kai_stream.settings import KafkaSettings
from kai_stream.streams.runtime import InRecord, SchedulerRuntime
from kai_stream.topics import TopicNames
from tests.streams.records import FakeRecord, tick

ROOT = Path(__file__).resolve().parents[2]
CODE = "test"
TOPICS = TopicNames.with_prefix("ahead-")


class _Log:
    """cluster-events of partition 0 as the broker holds them (``end``: how much a read sees), no decisions."""

    def __init__(self) -> None:
        self.events: list[ClusterEvent] = [
            *load_scenario((ROOT / "examples" / "fair-share.yaml").read_text()), tick(5.0)
        ]
        self.end = len(self.events)
        self.reads: list[int] = []
        self.bulk_reads: list[list[tuple[str, int]]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.garbage: list[int] = []
        """Offsets (after the events) holding undecodable bytes."""

    async def read(self, runtime: SchedulerRuntime, topic: str, partition: int, start: int = 0) -> list[Any]:
        if topic == TOPICS.decisions:
            return []
        self.reads.append(start)
        await self.gate.wait()
        records = [FakeRecord(i, dumps(e)) for i, e in enumerate(self.events[: self.end]) if i >= start]
        return records + [FakeRecord(i, b"\xff garbage") for i in self.garbage if i >= start]

    async def read_from_start(
        self, runtime: SchedulerRuntime, tps: list[tuple[str, int]]
    ) -> dict[tuple[str, int], list[Any]]:
        self.bulk_reads.append(sorted(tps))
        return {(topic, partition): await self.read(runtime, topic, partition) for topic, partition in tps}

    def batch(self, first: int) -> list[InRecord]:
        return [InRecord(0, i, b"default", dumps(self.events[i]), 0) for i in range(first, len(self.events))]


async def _send(topic: str, partition: int, key: bytes, record: Model) -> Any:
    async def done() -> None:
        return None

    return done()


def _runtime(monkeypatch: pytest.MonkeyPatch, log: _Log) -> SchedulerRuntime:
    async def read(self: SchedulerRuntime, topic: str, partition: int, start: int = 0) -> list[Any]:
        return await log.read(self, topic, partition, start)

    async def read_from_start(
        self: SchedulerRuntime, tps: list[tuple[str, int]], starts: dict[tuple[str, int], int] | None = None
    ) -> dict[tuple[str, int], list[Any]]:
        assert not starts, "no snapshot topic: both logs are read from the start"
        return await log.read_from_start(self, tps)

    monkeypatch.setattr(SchedulerRuntime, "_read_partition", read)
    monkeypatch.setattr(SchedulerRuntime, "_read_from_start", read_from_start)
    return SchedulerRuntime(KafkaSettings(), TOPICS, SchedulerConfig(), _send, partitions=1, code_version=CODE)


def _reference(events: list[ClusterEvent]) -> ClusterState:
    state = ClusterState()
    for offset, event in enumerate(events):
        apply(state, event, offset)
    return state


async def test_a_partition_built_ahead_is_used_when_its_first_record_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _Log()
    runtime = _runtime(monkeypatch, log)
    runtime.assigned([0], generation=1, ahead=True)
    await asyncio.sleep(0.05)
    assert log.reads == [0]  # read before any record was delivered
    assert log.bulk_reads == [[(TOPICS.cluster_events, 0), (TOPICS.decisions, 0)]]
    log.events.append(tick(9.0))
    published = await runtime.process(log.batch(len(log.events) - 3))
    assert log.reads == [0], "rebuilt again although the state built ahead covered the batch's start"
    state = runtime.engines[0].pools["default"].state
    reference = _reference(log.events)
    assert state.offset == reference.offset == len(log.events) - 1
    assert state.pods.keys() == reference.pods.keys() and state.now == reference.now
    assert published, "the rebuilt pool ran a cycle"


async def test_a_partition_built_ahead_short_of_its_first_record_is_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _Log()
    log.end = len(log.events) - 4  # the broker's end reported low while the partition was built ahead
    runtime = _runtime(monkeypatch, log)
    runtime.assigned([0], generation=1, ahead=True)
    await asyncio.sleep(0.05)
    log.end = len(log.events)
    first = len(log.events) - 2  # an earlier owner consumed what lies between the short end and here
    await runtime.process(log.batch(first))
    assert log.reads == [0, 0]
    state = runtime.engines[0].pools["default"].state
    reference = _reference(log.events)
    assert state.offset == reference.offset and state.pods.keys() == reference.pods.keys()


async def test_a_partition_revoked_while_built_ahead_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _Log()
    log.gate.clear()
    runtime = _runtime(monkeypatch, log)
    runtime.assigned([0], generation=1, ahead=True)
    await asyncio.sleep(0.05)
    runtime.revoked([0], generation=1)
    runtime.assigned([], generation=2, ahead=True)
    log.gate.set()
    await asyncio.sleep(0.05)
    assert runtime.engines == {}
    await runtime.process(log.batch(0))  # assigned again later: rebuilt from the log, not from the dropped build
    assert log.reads == [0, 0]
    assert runtime.engines[0].offset == len(log.events) - 1


async def test_malformed_records_found_ahead_are_dead_lettered_off_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _Log()
    log.garbage = [len(log.events)]
    runtime = _runtime(monkeypatch, log)
    letting_out = asyncio.Event()
    lettered: list[list[int]] = []

    async def dead_letter_missing(self: SchedulerRuntime, malformed: list[tuple[InRecord, str]]) -> None:
        await letting_out.wait()
        lettered.append([record.offset for record, _ in malformed])

    monkeypatch.setattr(SchedulerRuntime, "_dead_letter_missing", dead_letter_missing)
    runtime.assigned([0], generation=1, ahead=True)
    await asyncio.sleep(0.05)
    await asyncio.wait_for(runtime.process([InRecord(0, log.garbage[0], b"default", b"\xff garbage", 0)]), 5.0)
    assert runtime.engines[0].offset == log.garbage[0]  # built and used while the letter still waits
    assert lettered == []
    letting_out.set()
    await asyncio.sleep(0.05)
    assert lettered == [[log.garbage[0]]]


async def test_forgetting_everything_drops_the_builds_ahead_too(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _Log()
    log.gate.clear()
    runtime = _runtime(monkeypatch, log)
    runtime.assigned([0], generation=1, ahead=True)
    await asyncio.sleep(0.05)
    runtime.forget_all()  # a failed batch: whatever is held or being built may not be used
    log.gate.set()
    await runtime.process(log.batch(0))
    assert log.reads == [0, 0]
