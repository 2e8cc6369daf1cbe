"""SchedulerRuntime over the real broker, without faust: dead letters, publish, restart without re-deciding, cycles
only on Ticks (``cycle_on_tick``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ALL_POOLS, BindRequested, DeadLetter, Model, dumps, loads_decisions_record
from kai_stream.core.manifests import load_scenario
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
