"""On Apache Kafka a cycle's decisions go into the batch's transaction as record batches (``send_unit``): a cycle
larger than one batch fills several, every decision lands once and in chain order, and the runtime's end of the
decisions log (``decisions_end``, what a rebuild reads up to) is the offset after the last decision."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, defaultdict

import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    ClusterEvent,
    DecisionBase,
    NodeObserved,
    NodeSpec,
    Resources,
    dumps,
    loads_decisions_record,
)
from kai_stream.kafka import read_topic
from kai_stream.streams.exactly_once import UNIT_BATCH_BYTES, TransactionalLoop
from kai_stream.streams.runtime import SchedulerRuntime
from kai_stream.topics import TopicNames, create_topics
from tests.conftest import settings_for
from tests.log_checks import assert_chained
from tests.streams.test_fenced_kafka import HOME, PARTITIONS, _binds, _cluster, _pod, _publish, _unused_send

PODS = 3000
NODES = 400


def _nodes() -> list[ClusterEvent]:
    return [
        NodeObserved(event_id=f"n{i}", ts=0.0, node=NodeSpec(
            name=f"n{i}", allocatable=Resources(gpu_milli=8000, cpu_milli=10**6, memory=2**40)))
        for i in range(NODES)
    ]


@pytest.mark.kafka
async def test_a_cycle_larger_than_a_record_batch_lands_whole_and_in_order(
    kafka_broker: str, topic_prefix: str
) -> None:
    settings = settings_for(kafka_broker)
    names = TopicNames.with_prefix(topic_prefix)
    await create_topics(settings, names=names)
    runtime = SchedulerRuntime(settings, names, SchedulerConfig(), _unused_send, partitions=PARTITIONS["decisions"])
    processor = TransactionalLoop(
        runtime, settings, names, group_id=f"{topic_prefix}processor", batch_max=5000, snapshot_interval_s=0,
        commit_interval_s=0.2,
    )
    queue = [e for e in _cluster() if not isinstance(e, NodeObserved)]
    await _publish(settings, names, [*_nodes(), *queue, *(_pod(f"p{i}", 1.0 + i / 1e4) for i in range(PODS))])
    running = asyncio.create_task(processor.run())
    try:
        deadline = time.monotonic() + 120
        while len(await _binds(settings, names)) < PODS:
            assert not running.done(), running
            assert time.monotonic() < deadline, "the pods were not all bound within 120 s"
            await asyncio.sleep(0.5)
        records = [r for r in await read_topic(settings, names.decisions) if r.partition == HOME]
        assert runtime.decisions_end[HOME] == records[-1].offset + 1
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running

    assert await _binds(settings, names) == Counter({f"p{i}": 1 for i in range(PODS)})
    decoded = [loads_decisions_record(r.value or b"") for r in records]
    decisions = [d for d in decoded if isinstance(d, DecisionBase)]
    assert_chained(decisions)
    cycle_bytes: defaultdict[int, int] = defaultdict(int)
    for decision in decisions:
        cycle_bytes[decision.input_offset] += len(dumps(decision))
    assert max(cycle_bytes.values()) > 2 * UNIT_BATCH_BYTES, "no cycle needed several record batches"
