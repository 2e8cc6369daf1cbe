"""A processor that rebuilds from a read of cluster-events that ends short of what an earlier instance consumed
(the broker's end reported low for a moment) must still fold every event before deciding, and fold each
recorded decision right after its input event: the state it decides on, and so every decision field, ts
included, is then the one replay rebuilds. The old rebuild jumped its offset to the recorded decisions' input
offset, so the events between the short end and that offset were skipped for good."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import AnyEvent, ClusterEvent, Model, dumps
from kai_stream.core.manifests import load_scenario
from kai_stream.core.state import ClusterState, apply
from kai_stream.settings import KafkaSettings
from kai_stream.streams.engine import Outgoing, PartitionEngine
from kai_stream.streams.runtime import InRecord, SchedulerRuntime
from kai_stream.topics import TopicNames
from tests.streams.records import FakeRecord, tick

ROOT = Path(__file__).resolve().parents[2]
CODE = "test"


def _log() -> list[ClusterEvent]:
    events: list[ClusterEvent] = list(load_scenario((ROOT / "examples" / "fair-share.yaml").read_text()))
    return [*events, tick(5.0)]


@pytest.mark.parametrize("skipped", [0, 1])
async def test_rebuild_from_a_short_read_skips_no_event_and_folds_decisions_after_their_input(
    monkeypatch: pytest.MonkeyPatch, skipped: int
) -> None:
    """``skipped``: events after the short end that the earlier instance consumed and committed, so they are
    not delivered again: the rebuild must read them."""
    events = _log()
    last = len(events) - 1
    earlier = PartitionEngine.for_config(0, SchedulerConfig(), CODE)
    for offset, event in enumerate(events):
        earlier.fold(offset, event)
    recorded = [item.record for item in earlier.cycle(["default"])]
    assert any(getattr(r, "input_offset", None) == last for r in recorded)

    short = last - 3
    topics = TopicNames.with_prefix("short-")

    reads: list[int] = []

    async def read(self: SchedulerRuntime, topic: str, partition: int, start: int = 0) -> list[Any]:
        if topic == topics.decisions:
            return [FakeRecord(i, dumps(r)) for i, r in enumerate(recorded)]
        reads.append(start)
        end = short + 1 if len(reads) == 1 else len(events)
        return [FakeRecord(i, dumps(e)) for i, e in enumerate(events[:end]) if i >= start]

    sent: list[Model] = []

    async def send(topic: str, partition: int, key: bytes, record: Model) -> Any:
        sent.append(record)

        async def done() -> None:
            return None

        return done()

    monkeypatch.setattr(SchedulerRuntime, "_read_partition", read)
    runtime = SchedulerRuntime(KafkaSettings(), topics, SchedulerConfig(), send, partitions=1, code_version=CODE)
    later = [*events, tick(9.0)]
    delivered_from = short + 1 + skipped
    batch = [InRecord(0, offset, b"default", dumps(later[offset]), 0) for offset in range(delivered_from, len(later))]
    published: list[Outgoing] = await runtime.process(batch)

    reference = ClusterState()
    pending = [r for r in recorded if hasattr(r, "input_offset")]
    for offset, event in enumerate(later):
        apply(reference, event, offset)
        for decision in [d for d in pending if d.input_offset == offset]:
            apply(reference, cast(AnyEvent, decision))
    rebuilt = runtime.engines[0].pools["default"].state
    assert rebuilt.offset == reference.offset == len(later) - 1
    assert rebuilt.pods == reference.pods, "events after the short read were skipped"
    assert rebuilt.assumed == reference.assumed and rebuilt.now == reference.now
    assert reads == ([0] if not skipped else [0, short + 1])
    for item in published:
        decision = item.record
        assert getattr(decision, "input_offset", len(later) - 1) == len(later) - 1
        assert getattr(decision, "ts", reference.now) == reference.now
