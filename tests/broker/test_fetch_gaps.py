"""Contiguous fetches (kai_stream/fetchgaps.py): the cut of a fetch answer at its first hole, and on the real
broker a consumer tailing one partition that several producers write at once: it must get every offset, in order
(Tansu can answer with a batch before an earlier-numbered one is stored; without the guard the consumer moved
past such records and never read them)."""

from __future__ import annotations

import asyncio
import struct
import time
from itertools import pairwise
from types import SimpleNamespace

from aiokafka import TopicPartition

from kai_stream.fetchgaps import FetchGapGuard, contiguous_prefix
from kai_stream.kafka import make_consumer, make_producer
from kai_stream.settings import KafkaSettings


def batch(base: int, count: int = 1, magic: int = 2, body: int = 20) -> bytes:
    """A record-batch header (format v2 layout) covering ``base .. base+count-1``, padded with ``body`` bytes."""
    rest = struct.pack(">iBIhi", 0, magic, 0, 0, count - 1) + bytes(61 - 12 - 15 + body)
    return struct.pack(">qi", base, len(rest)) + rest


def fetch(offset: int) -> SimpleNamespace:
    return SimpleNamespace(topics=[("t", [(0, offset, 1 << 20)])])


def answer(records: bytes, highwater: int = 100) -> SimpleNamespace:
    return SimpleNamespace(topics=[("t", [(0, 0, highwater, highwater, None, records)])])


def test_contiguous_batches_pass_whole() -> None:
    records = batch(10, 3) + batch(13) + batch(14, 2)
    assert contiguous_prefix(records, 10) == (len(records), None)
    assert contiguous_prefix(records, 11) == (len(records), None)  # the first batch may start before the offset


def test_cut_before_the_first_batch_past_a_hole() -> None:
    records = batch(10, 3) + batch(14) + batch(15)
    assert contiguous_prefix(records, 10) == (len(batch(10, 3)), 13)
    assert contiguous_prefix(batch(11), 10) == (0, 10)


def test_other_message_formats_are_not_checked() -> None:
    records = batch(10, magic=1) + batch(20, magic=1)
    assert contiguous_prefix(records, 10) == (len(records), None)


def test_guard_cuts_the_answer_and_lets_a_lasting_hole_through_after_its_patience() -> None:
    now = [0.0]
    guard = FetchGapGuard(patience_s=5.0, clock=lambda: now[0])
    records = batch(10) + batch(12)
    response = answer(records)
    guard.cut(fetch(10), response)
    assert response.topics[0][1][0][-1] == batch(10)
    response = answer(batch(12))
    guard.cut(fetch(11), response)
    assert response.topics[0][1][0][-1] == b""
    assert guard.holes == 2
    now[0] = 6.0
    response = answer(batch(12))
    guard.cut(fetch(11), response)
    assert response.topics[0][1][0][-1] == batch(12)


async def test_tailing_consumer_gets_every_offset_while_producers_race_on_one_partition(
    kafka_settings: KafkaSettings, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}racing-producers"
    producers = [make_producer(kafka_settings, linger_ms=0) for _ in range(6)]
    per_producer = 2000
    for producer in producers:
        await producer.start()
    consumer = make_consumer(kafka_settings.model_copy(update={"fetch_max_wait_ms": 5}), group_id=None)
    try:
        await (await producers[0].send(topic, b"first", partition=0))
        await consumer.start()
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)

        async def produce(k: int) -> None:
            for i in range(per_producer):
                await (await producers[k].send(topic, f"{k}-{i}".encode(), partition=0))

        writers = asyncio.gather(*(produce(k) for k in range(len(producers))))
        offsets: list[int] = []
        total = 1 + len(producers) * per_producer
        deadline = time.monotonic() + 120
        while (not offsets or offsets[-1] < total - 1) and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=100)
            offsets.extend(record.offset for records in batches.values() for record in records)
        await writers
    finally:
        await consumer.stop()
        for producer in producers:
            await producer.stop()
    holes = [(a, b) for a, b in pairwise(offsets) if b != a + 1]
    assert holes == []
    assert offsets == list(range(total))
