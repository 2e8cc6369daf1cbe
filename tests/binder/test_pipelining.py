"""Pipelined batches over the real broker: a slow pod holds back only its own later actions and the commit of
its batch, never other pods; a decision planned in a batch in flight is not applied again."""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import TopicPartition

from kai_stream.binder import Binder
from kai_stream.binder.plan import Action
from kai_stream.core.events import Decision, Outcome
from kai_stream.kafka import make_consumer, make_producer, partition_for, publish, read_topic
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames

from .builders import bind, evict, pod


class GatedApplier:
    """Records each action as it starts; pod ``slow``'s first action waits for ``gate``."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str]] = []
        self.gate = asyncio.Event()

    async def apply(self, action: Action, *, fresh: bool = False) -> Outcome | None:
        decision = action.decision
        self.started.append((decision.name, decision.type))
        if decision.name == "slow" and decision.type == "BindRequested":
            await self.gate.wait()
        return None


async def test_slow_pod_blocks_only_its_own_actions_and_the_commit(
    kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    slow, fast, other = ({**p, "metadata": {**p["metadata"], "uid": f"u-{n}"}} for n, p in
                         (("slow", pod("slow")), ("fast", pod("fast")), ("other", pod("other"))))
    batches: list[list[Decision]] = [
        [bind(slow, "n1", offset=1), bind(fast, "n1", offset=2)],
        [bind(other, "n1", offset=3), bind(fast, "n1", offset=2)],
        [evict(slow, offset=4)],
    ]
    producer = make_producer(kafka_settings)
    await producer.start()
    try:
        for decision in (d for batch in batches for d in batch):
            await publish(producer, topics.decisions, decision, pool="default")
        records = await read_topic(kafka_settings, topics.decisions)
        assert len(records) == 5
        tp = TopicPartition(topics.decisions, partition_for("default", 8))
        consumer = make_consumer(kafka_settings, group_id=f"pipelining-{uuid.uuid4().hex[:8]}")
        await consumer.start()
        try:
            consumer.assign([tp])
            applier = GatedApplier()
            binder = Binder(consumer, producer, applier, topics=topics)  # type: ignore[arg-type]
            await binder.start(tp, records[:2])
            await binder.start(tp, records[2:4])
            await binder.start(tp, records[4:])
            await asyncio.sleep(0.3)
            assert sorted(applier.started) == [("fast", "BindRequested"), ("other", "BindRequested"),
                                               ("slow", "BindRequested")]
            assert await consumer.committed(tp) is None  # the second batch is done, the first is not
            applier.gate.set()
            await asyncio.wait_for(binder.wait_idle(), 10)
            assert [a for a in applier.started if a[0] == "slow"] == [("slow", "BindRequested"),
                                                                       ("slow", "EvictionRequested")]
            assert [a[0] for a in applier.started].count("fast") == 1
            assert await consumer.committed(tp) == records[-1].offset + 1
        finally:
            await consumer.stop()
    finally:
        await producer.stop()
