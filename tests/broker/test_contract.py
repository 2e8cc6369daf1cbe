"""The broker contract: what kai-stream relies on from a Kafka-protocol broker, run on both embedded engines.

Each test states what each engine guarantees. Apache Kafka passes every clause; on Tansu (0.6.0, memory storage)
the clauses it lacks are asserted as its known limits, so a Tansu upgrade that fixes one fails here and the
workaround it made necessary can go:

| clause | Apache Kafka | Tansu |
|---|---|---|
| produce/consume, keyed partitions, order | yes | yes |
| consumer groups: rebalance on join and leave | yes | yes |
| committed offsets survive a consumer restart | yes | yes |
| ``end_offsets()`` = high-watermark | yes | no: the last batch's base offset + 1 |
| idempotent producer | yes | no: InitProducerId fails |
| transactions (read_committed hides aborted) | yes | no: InitProducerId fails |
| compaction (``cleanup.policy=compact``) | yes | no: every record stays |
| time retention (``retention.ms``) | yes | no: the log start stays at 0 |
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from kai_stream.kafka import Record, make_consumer, make_producer, topic_partitions
from kai_stream.settings import KafkaSettings
from tests.broker.admin import create_topic
from tests.engines import EngineUnderTest

pytestmark = pytest.mark.kafka

LIMIT_WAIT_S = 4.0
"""How long Tansu gets to show compaction or retention before the test holds it as a known limit (Kafka, with
the embedded engine's 0.5 s cleaner backoff and 1 s retention check, shows both within about 2 s)."""


def _topic(kind: str) -> str:
    return f"contract-{kind}-{uuid.uuid4().hex[:8]}"


async def _eventually(check: Callable[[], Awaitable[bool]], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if await check():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)


async def _produce(
    settings: KafkaSettings, topic: str, records: list[tuple[bytes | None, bytes]], **kw: object
) -> None:
    producer = make_producer(settings, **kw)
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(topic, value, key=key, partition=0)
    finally:
        await producer.stop()


async def read_topic(settings: KafkaSettings, topic: str, *, timeout_s: float = 10.0) -> list[Record]:
    """Every record of ``topic`` up to its high-watermark through a plain aiokafka consumer (the contract is the
    broker's, so none of kai-stream's consumer workarounds take part)."""
    consumer = AIOKafkaConsumer(**settings.client_kwargs(), enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    try:
        partitions = await topic_partitions(consumer, topic)
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while True:
            batches = await consumer.getmany(timeout_ms=100)
            out += [r for tp in sorted(batches) for r in batches[tp]]
            positions = [await consumer.position(tp) for tp in tps]
            highs = [consumer.highwater(tp) for tp in tps]
            if all(h is not None and p >= h for p, h in zip(positions, highs, strict=True)):
                return out
            if time.monotonic() > deadline:
                raise TimeoutError(f"did not read {topic} to its end within {timeout_s}s")
    finally:
        await consumer.stop()


async def _log_bounds(settings: KafkaSettings, topic: str) -> tuple[int, int]:
    consumer = AIOKafkaConsumer(**settings.client_kwargs())
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        return (await consumer.beginning_offsets([tp]))[tp], (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()


async def test_produce_and_consume_in_order_per_partition(engine: EngineUnderTest) -> None:
    topic = _topic("pc")
    await create_topic(engine.settings, topic, partitions=3)
    producer = make_producer(engine.settings)
    await producer.start()
    try:
        for i in range(30):
            await producer.send_and_wait(topic, f"{i}".encode(), partition=i % 3)
    finally:
        await producer.stop()
    records = await read_topic(engine.settings, topic)
    assert len(records) == 30
    for partition in range(3):
        values = [int(r.value) for r in records if r.partition == partition]
        assert values == list(range(partition, 30, 3))
        assert [r.offset for r in records if r.partition == partition] == list(range(10))


async def _assignment_is(consumer: AIOKafkaConsumer, expected: set[int], timeout_s: float) -> bool:
    async def check() -> bool:
        await consumer.getmany(timeout_ms=100)
        return {tp.partition for tp in consumer.assignment()} == expected

    return await _eventually(check, timeout_s)


async def test_group_rebalances_on_join_and_leave(engine: EngineUnderTest) -> None:
    topic, group = _topic("group"), f"g-{uuid.uuid4().hex[:8]}"
    await create_topic(engine.settings, topic, partitions=2)
    first = make_consumer(engine.settings, topic, group_id=group)
    await first.start()
    second = make_consumer(engine.settings, topic, group_id=group)
    try:
        assert await _assignment_is(first, {0, 1}, 20)
        await second.start()
        polls = [first.getmany(timeout_ms=100) for _ in range(3)]
        await asyncio.gather(*polls)

        async def split() -> bool:
            await asyncio.gather(first.getmany(timeout_ms=100), second.getmany(timeout_ms=100))
            return len(first.assignment()) == 1 and len(second.assignment()) == 1

        assert await _eventually(split, 30), (first.assignment(), second.assignment())
        assert first.assignment() | second.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        await second.stop()
        assert await _assignment_is(first, {0, 1}, 30)
    finally:
        await second.stop()
        await first.stop()


async def test_committed_offsets_survive_a_consumer_restart(engine: EngineUnderTest) -> None:
    topic, group = _topic("commit"), f"g-{uuid.uuid4().hex[:8]}"
    await create_topic(engine.settings, topic)
    await _produce(engine.settings, topic, [(None, f"{i}".encode()) for i in range(10)])
    tp = TopicPartition(topic, 0)
    consumer = make_consumer(engine.settings, topic, group_id=group)
    await consumer.start()
    try:
        seen: list[int] = []
        while len(seen) < 6:
            batches = await consumer.getmany(timeout_ms=500, max_records=6 - len(seen))
            seen += [r.offset for records in batches.values() for r in records]
        await consumer.commit({tp: 6})
    finally:
        await consumer.stop()
    again = make_consumer(engine.settings, topic, group_id=group)
    await again.start()
    try:
        assert await again.committed(tp) == 6
        resumed: dict[TopicPartition, list[Any]] = {}
        while not resumed:
            resumed = await again.getmany(timeout_ms=500)
        first = next(iter(resumed.values()))[0]
        assert first.offset == 6
    finally:
        await again.stop()


async def test_end_offsets_match_the_high_watermark(engine: EngineUnderTest) -> None:
    """Two batches of 10 and 7 records: the high-watermark a fetch reports is 17 on both engines; ``end_offsets()``
    (ListOffsets latest) says 17 on Kafka and 11, the last batch's base offset + 1, on Tansu."""
    topic = _topic("end")
    await create_topic(engine.settings, topic)
    producer = make_producer(engine.settings)
    await producer.start()
    try:
        for size in (10, 7):
            batch = producer.create_batch()
            for i in range(size):
                assert batch.append(key=None, value=f"{i}".encode(), timestamp=None) is not None
            await (await producer.send_batch(batch, topic, partition=0))
    finally:
        await producer.stop()
    tp = TopicPartition(topic, 0)
    consumer = make_consumer(engine.settings, group_id=None)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        while consumer.highwater(tp) is None:
            await consumer.getmany(timeout_ms=200)
        assert consumer.highwater(tp) == 17
        end = (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()
    assert end == (17 if engine.is_kafka else 10 + 1)


async def _start_and_send(producer: AIOKafkaProducer, topic: str, value: bytes) -> int:
    await producer.start()
    offset: int = (await producer.send_and_wait(topic, value, partition=0)).offset
    return offset


async def test_idempotent_producer(engine: EngineUnderTest) -> None:
    topic = _topic("idem")
    await create_topic(engine.settings, topic)
    producer = AIOKafkaProducer(**engine.settings.client_kwargs(), enable_idempotence=True, acks="all")
    try:
        if engine.is_kafka:
            assert await asyncio.wait_for(_start_and_send(producer, topic, b"once"), 60) == 0
        else:
            with pytest.raises(KafkaError):
                await asyncio.wait_for(_start_and_send(producer, topic, b"once"), 30)
    finally:
        await producer.stop()
    values = [r.value for r in await read_topic(engine.settings, topic, timeout_s=10)]
    assert values == ([b"once"] if engine.is_kafka else [])


async def _transactions(settings: KafkaSettings, topic: str) -> None:
    producer = AIOKafkaProducer(**settings.client_kwargs(), transactional_id=f"tx-{uuid.uuid4().hex[:8]}")
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send(topic, b"committed", partition=0)
        await producer.begin_transaction()
        await producer.send(topic, b"aborted", partition=0)
        await producer.abort_transaction()
    finally:
        await producer.stop()


async def test_transactional_producer(engine: EngineUnderTest) -> None:
    topic = _topic("tx")
    await create_topic(engine.settings, topic)
    if not engine.is_kafka:
        with pytest.raises(KafkaError):
            await asyncio.wait_for(_transactions(engine.settings, topic), 30)
        return
    await asyncio.wait_for(_transactions(engine.settings, topic), 60)
    committed = make_consumer(engine.settings, group_id=None, isolation_level="read_committed")
    await committed.start()
    try:
        tp = TopicPartition(topic, 0)
        committed.assign([tp])
        await committed.seek_to_beginning(tp)
        seen: list[bytes] = []

        async def done() -> bool:
            batches = await committed.getmany(timeout_ms=200)
            seen.extend(r.value for records in batches.values() for r in records if r.value is not None)
            position: int = await committed.position(tp)
            return position >= 4  # two records and two transaction markers

        assert await _eventually(done, 20)
    finally:
        await committed.stop()
    assert seen == [b"committed"]


async def test_compaction_keeps_the_latest_record_per_key(engine: EngineUnderTest) -> None:
    topic = _topic("compact")
    await create_topic(
        engine.settings,
        topic,
        configs={"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"},
    )
    await _produce(engine.settings, topic, [(f"k{i % 2}".encode(), f"{i}".encode()) for i in range(10)])
    await asyncio.sleep(0.3)
    await _produce(engine.settings, topic, [(b"roll", b"last")])  # rolls the segment so the first can be cleaned

    async def latest_only() -> bool:
        values = [r.value for r in await read_topic(engine.settings, topic, timeout_s=10)]
        return values == [b"8", b"9", b"last"]

    if engine.is_kafka:
        assert await _eventually(latest_only, 30)
    else:
        assert not await _eventually(latest_only, LIMIT_WAIT_S)
        assert len(await read_topic(engine.settings, topic, timeout_s=10)) == 11


async def test_time_retention_advances_the_log_start(engine: EngineUnderTest) -> None:
    topic = _topic("retain")
    await create_topic(engine.settings, topic, configs={"retention.ms": "1000", "segment.ms": "100"})
    await _produce(engine.settings, topic, [(None, f"{i}".encode()) for i in range(5)])
    await asyncio.sleep(1.2)
    await _produce(engine.settings, topic, [(None, b"fresh")])  # rolls the expired segment

    async def expired() -> bool:
        return (await _log_bounds(engine.settings, topic))[0] == 5

    if engine.is_kafka:
        assert await _eventually(expired, 30)
        assert [r.value for r in await read_topic(engine.settings, topic, timeout_s=10)] == [b"fresh"]
    else:
        assert not await _eventually(expired, LIMIT_WAIT_S)
        assert await _log_bounds(engine.settings, topic) == (0, 6)
