"""SchedulerRuntime over the real broker, without faust: dead letters, publish, restart without re-deciding, cycles
only on Ticks (``cycle_on_tick``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaProducer

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    ALL_POOLS,
    BindRequested,
    DeadLetter,
    Model,
    PodObserved,
    dumps,
    loads_decisions_record,
)
from kai_stream.core.manifests import load_scenario, object_to_events
from kai_stream.emulation import round_barrier
from kai_stream.emulation.outcomes import pod_bound
from kai_stream.kafka import make_producer, partition_for, read_topic
from kai_stream.settings import KafkaSettings
from kai_stream.streams.engine import is_decision
from kai_stream.streams.runtime import InRecord, SchedulerRuntime
from kai_stream.topics import TopicNames, create_topics

ROOT = Path(__file__).resolve().parents[2]


def _runtime(
    kafka: KafkaSettings, topics: TopicNames, producer: AIOKafkaProducer, *, cycle_on_tick: bool = False
) -> SchedulerRuntime:
    async def send(topic: str, partition: int, key: bytes, record: Model) -> Any:
        return await producer.send(topic, dumps(record), key=key, partition=partition)

    return SchedulerRuntime(kafka, topics, SchedulerConfig(), send, partitions=8, cycle_on_tick=cycle_on_tick)


async def _logged(kafka: KafkaSettings, topic: str) -> list[InRecord]:
    """The topic's records as the runtime is handed them."""
    return [InRecord(r.partition, r.offset, r.key, r.value, r.timestamp) for r in await read_topic(kafka, topic)]


async def _publish_fair_share(producer: AIOKafkaProducer, topics: TopicNames, partition: int) -> None:
    for event in load_scenario((ROOT / "examples" / "fair-share.yaml").read_text()):
        assert event.pool in ("default", ALL_POOLS)
        await producer.send_and_wait(topics.cluster_events, dumps(event), key=b"default", partition=partition)


async def test_dead_letters_publishes_and_does_not_decide_twice_after_restart(
    kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    partition = partition_for("default", 8)
    producer = make_producer(kafka_settings)
    await producer.start()
    try:
        await producer.send_and_wait(topics.cluster_events, b"{not json", key=b"default", partition=partition)
        await _publish_fair_share(producer, topics, partition)
        records = await _logged(kafka_settings, topics.cluster_events)
        first = _runtime(kafka_settings, topics, producer)
        published = await first.process(records[:10])
        published += await first.process(records[10:])
        assert published

        decisions = [loads_decisions_record(r.value or b"") for r in await read_topic(kafka_settings, topics.decisions)]
        assert decisions[0].type == "ConfigRecorded"
        assert len(decisions) == len(published)
        dead = await read_topic(kafka_settings, topics.dead_letter)
        letters = [DeadLetter.model_validate_json(r.value or b"") for r in dead]
        assert [(d.offset, d.value_text) for d in letters] == [(0, "{not json")]
        assert "malformed" in letters[0].reason

        restarted = _runtime(kafka_settings, topics, producer)
        assert await restarted.process(records) == []
        again = await read_topic(kafka_settings, topics.decisions)
        assert len(again) == len(decisions)
        engine = restarted.engines[partition]
        assert engine.pools["default"].head == first.engines[partition].pools["default"].head
    finally:
        await producer.stop()


async def test_cycle_on_tick_decides_only_at_a_tick_even_one_a_rebuild_already_read(
    kafka_settings: KafkaSettings, topics: TopicNames, topic_prefix: str
) -> None:
    partition = partition_for("default", 8)
    producer = make_producer(kafka_settings)
    await producer.start()
    try:
        await _publish_fair_share(producer, topics, partition)
        scenario = await _logged(kafka_settings, topics.cluster_events)
        waiting = _runtime(kafka_settings, topics, producer, cycle_on_tick=True)
        assert await waiting.process(scenario) == [], "no Tick yet: fold only"

        tick = dumps(round_barrier(1, 0.0))
        await producer.send_and_wait(topics.cluster_events, tick, key=ALL_POOLS.encode(), partition=partition)
        records = await _logged(kafka_settings, topics.cluster_events)
        assert len(records) == len(scenario) + 1
        decided = [o.record for o in await waiting.process(records[-1:]) if is_decision(o.record)]
        assert decided and {d.input_offset for d in decided} == {records[-1].offset}

        # A processor that starts after the Tick is on the log: its rebuild reads the Tick, and still decides
        # there (once), as the one that saw it arrive did.
        late = _runtime(kafka_settings, topics, producer, cycle_on_tick=True)
        assert await late.process(records[:3]) == [], "the decisions were published: a rebuild folds them"
        fresh_topics = TopicNames.with_prefix(f"{topic_prefix}fresh-")
        await create_topics(kafka_settings, names=fresh_topics)
        for record in records:
            await producer.send_and_wait(
                fresh_topics.cluster_events, record.value or b"", key=record.key, partition=partition
            )
        fresh = _runtime(kafka_settings, fresh_topics, producer, cycle_on_tick=True)
        rebuilt = [o.record for o in await fresh.process(records[:1]) if is_decision(o.record)]
        assert [dumps(d) for d in rebuilt] == [dumps(d) for d in decided]
    finally:
        await producer.stop()


async def test_a_batch_of_feedback_alone_runs_no_cycle(kafka_settings: KafkaSettings, topics: TopicNames) -> None:
    """Binds confirmed (``urgency.is_feedback``) are folded but start no cycle; the next other record does."""
    partition = partition_for("default", 8)
    producer = make_producer(kafka_settings)
    await producer.start()
    try:
        await _publish_fair_share(producer, topics, partition)
        scenario = await _logged(kafka_settings, topics.cluster_events)
        runtime = _runtime(kafka_settings, topics, producer)
        binds = [o.record for o in await runtime.process(scenario) if isinstance(o.record, BindRequested)]
        assert binds
        engine = runtime.engines[partition]
        cycled: list[set[str]] = []
        cycle = engine.cycle

        def counted(pools: Any, inspect: Any = None) -> Any:
            cycled.append(set(pools))
            return cycle(pools, inspect)

        engine.cycle = counted  # type: ignore[method-assign]
        for bind in binds:
            await producer.send_and_wait(
                topics.cluster_events, dumps(pod_bound(bind)), key=b"default", partition=partition
            )
        await producer.send_and_wait(
            topics.cluster_events, dumps(round_barrier(1, 0.0)), key=ALL_POOLS.encode(), partition=partition
        )
        records = (await _logged(kafka_settings, topics.cluster_events))[len(scenario):]
        await runtime.process(records[:-1])
        assert cycled == [], "feedback alone: folded, no cycle"
        assert engine.offset == records[-2].offset
        await runtime.process(records[-1:])
        assert cycled == [{"default"}], "a Tick cycles the pool"
    finally:
        await producer.stop()


_LATE_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: late
  namespace: research
  creationTimestamp: "2026-01-01T00:01:00Z"
  labels: {kai.scheduler/queue: team-a}
spec:
  schedulerName: kai-scheduler
  containers: [{name: main, resources: {limits: {nvidia.com/gpu: "1"}}}]
"""


async def test_a_deferred_cycle_runs_once_a_batch_brings_feedback_alone(
    kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    """Under a backlog a cycle waits for more records (``max_cycle_delay_s``) only while batches bring records other
    than feedback: the batch of binds confirmed that follows a new pod's runs the cycle the pod waited for."""
    partition = partition_for("default", 8)
    producer = make_producer(kafka_settings)
    await producer.start()
    try:
        await _publish_fair_share(producer, topics, partition)
        scenario = await _logged(kafka_settings, topics.cluster_events)

        async def send(topic: str, p: int, key: bytes, record: Model) -> Any:
            return await producer.send(topic, dumps(record), key=key, partition=p)

        runtime = SchedulerRuntime(
            kafka_settings, topics, SchedulerConfig(), send, partitions=8, max_cycle_delay_s=60.0
        )

        def backlog(p: int, last_offset: int) -> int:
            return 1

        binds = [o.record for o in await runtime.process(scenario) if isinstance(o.record, BindRequested)]
        assert binds
        engine = runtime.engines[partition]
        cycled: list[set[str]] = []
        cycle = engine.cycle

        def counted(pools: Any, inspect: Any = None) -> Any:
            cycled.append(set(pools))
            return cycle(pools, inspect)

        engine.cycle = counted  # type: ignore[method-assign]
        runtime._last_cost[partition] = 60.0  # as if the last cycle had taken a minute: the next one may wait
        for event in object_to_events(yaml.safe_load(_LATE_POD), ts=60.0):
            await producer.send_and_wait(topics.cluster_events, dumps(event), key=b"default", partition=partition)
        for bind in binds:
            await producer.send_and_wait(
                topics.cluster_events, dumps(pod_bound(bind)), key=b"default", partition=partition
            )
        records = (await _logged(kafka_settings, topics.cluster_events))[len(scenario):]
        assert await runtime.process(records[:1], backlog) == []
        assert cycled == [] and runtime.deferred(partition), "a new pod under a backlog waits for more records"
        published = await runtime.process(records[1:], backlog)
        assert cycled == [{"default"}], "feedback alone ends the wait"
        assert any(getattr(o.record, "name", None) == "late" for o in published)
        assert not runtime.deferred(partition)
    finally:
        await producer.stop()


async def test_a_backlogs_remainder_is_folded_into_the_cycle_its_bulk_waits_for(
    kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    """A batch that leaves records known to follow puts its cycle off for as long as its folding took (the last cycle
    was cheap): the remainder, fetched meanwhile, is decided in the same cycle, not in a second one."""
    partition = partition_for("default", 8)
    producer = make_producer(kafka_settings)
    await producer.start()

    async def send(topic: str, p: int, key: bytes, record: Model) -> Any:
        return await producer.send(topic, dumps(record), key=key, partition=p)

    try:
        events = load_scenario((ROOT / "examples" / "fair-share.yaml").read_text())
        pods = [e for e in events if isinstance(e, PodObserved)]
        assert len(pods) > 3
        for infra in [e for e in events if not isinstance(e, PodObserved)]:
            await producer.send_and_wait(topics.cluster_events, dumps(infra), key=b"default", partition=partition)
        runtime = SchedulerRuntime(
            kafka_settings, topics, SchedulerConfig(), send, partitions=8, max_cycle_delay_s=60.0
        )
        await runtime.process(await _logged(kafka_settings, topics.cluster_events))
        engine = runtime.engines[partition]
        cycled: list[set[str]] = []
        cycle = engine.cycle

        def counted(pools: Any, inspect: Any = None) -> Any:
            cycled.append(set(pools))
            return cycle(pools, inspect)

        engine.cycle = counted  # type: ignore[method-assign]
        for pod in pods:
            await producer.send_and_wait(topics.cluster_events, dumps(pod), key=b"default", partition=partition)
        records = (await _logged(kafka_settings, topics.cluster_events))[-len(pods) :]
        end = records[-1].offset

        def backlog(p: int, last: int) -> int:
            return end - last

        assert await runtime.process(records[:-3], backlog) == []
        assert cycled == [] and runtime.deferred(partition), "three records follow: the cycle waits for them"
        published = await runtime.process(records[-3:], backlog)
        assert cycled == [{"default"}], "the caught-up backlog is decided in one cycle"
        decided = {getattr(o.record, "name", None) for o in published}
        assert {p.pod.name for p in pods[-3:]} <= decided, "the remainder's pods are decided in that cycle"
        assert any(isinstance(o.record, BindRequested) for o in published)
    finally:
        await producer.stop()
