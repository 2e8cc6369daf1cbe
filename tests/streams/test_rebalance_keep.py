"""A rebalance keeps the state of the partitions a processor gets back in the very next generation (nobody else
can have owned them in between) and drops every other, so a survivor rebuilds only what it took over."""

from __future__ import annotations

from typing import Any

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import Model
from kai_stream.settings import KafkaSettings
from kai_stream.streams.engine import PartitionEngine
from kai_stream.streams.runtime import SchedulerRuntime
from kai_stream.topics import TopicNames


async def _send(topic: str, partition: int, key: bytes, record: Model) -> Any:
    raise AssertionError("nothing is published here")


def _runtime(partitions: list[int]) -> tuple[SchedulerRuntime, dict[int, PartitionEngine]]:
    runtime = SchedulerRuntime(KafkaSettings(), TopicNames(), SchedulerConfig(), _send, partitions=8)
    for p in partitions:
        runtime.engines[p] = PartitionEngine.for_config(p, SchedulerConfig(), "t")
    return runtime, dict(runtime.engines)


def test_partitions_assigned_again_in_the_next_generation_keep_their_state() -> None:
    runtime, before = _runtime([0, 1, 2, 3])
    runtime.revoked([0, 1, 2, 3], generation=4)
    assert runtime.engines == before
    runtime.assigned([1, 3, 5], generation=5)
    assert sorted(runtime.engines) == [1, 3]
    assert runtime.engines[1] is before[1] and runtime.engines[3] is before[3]


def test_a_skipped_generation_drops_everything() -> None:
    runtime, _ = _runtime([0, 1])
    runtime.revoked([0, 1], generation=4)
    runtime.assigned([0, 1], generation=6)  # another member may have owned them in generation 5
    assert runtime.engines == {}


def test_an_assignment_without_a_revocation_before_it_drops_everything() -> None:
    runtime, _ = _runtime([0, 1])
    runtime.assigned([0, 1], generation=1)
    assert runtime.engines == {}
    runtime, _ = _runtime([0, 1])
    runtime.revoked([0, 1], generation=1)
    runtime.assigned([0, 1], generation=2)
    runtime.assigned([0, 1], generation=3)
    assert runtime.engines == {}
