"""``internals.expedite`` on the real broker: held records wait out a long linger unless expedited, and an expedited
record takes the ones held before it along, in order."""

from __future__ import annotations

import asyncio
import time

from kai_stream.internals import expedite
from kai_stream.kafka import make_producer, read_topic
from kai_stream.settings import KafkaSettings

LINGER_MS = 3000


async def test_expedited_record_goes_at_once_with_the_held_ones(
    kafka_settings: KafkaSettings, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}expedite"
    producer = make_producer(kafka_settings, linger_ms=LINGER_MS)
    await producer.start()
    try:
        await (await producer.send(topic, b"warm-up", partition=0))  # metadata and connection ready
        started = time.monotonic()
        held = [await producer.send(topic, f"held-{i}".encode(), partition=0) for i in range(3)]
        done, _ = await asyncio.wait(held, timeout=0.5)
        assert not done, "the producer sent held records before its linger ran out"
        urgent = await producer.send(topic, b"urgent", partition=0)
        expedite(producer, topic, 0)
        await asyncio.wait_for(asyncio.gather(*held, urgent), timeout=1.5)
        assert time.monotonic() - started < LINGER_MS / 1000
        offsets = [(await future).offset for future in (*held, urgent)]
    finally:
        await producer.stop()
    assert offsets == sorted(offsets)
    values = [r.value for r in await read_topic(kafka_settings, topic)]
    assert values == [b"warm-up", b"held-0", b"held-1", b"held-2", b"urgent"]


async def test_expedite_with_nothing_held_is_harmless(kafka_settings: KafkaSettings, topic_prefix: str) -> None:
    topic = f"{topic_prefix}expedite-idle"
    producer = make_producer(kafka_settings, linger_ms=LINGER_MS)
    await producer.start()
    try:
        expedite(producer, topic, 0)
        started = time.monotonic()
        held = await producer.send(topic, b"later", partition=0)
        expedite(producer, topic, 0)
        await asyncio.wait_for(held, timeout=1.5)
        assert time.monotonic() - started < LINGER_MS / 1000
    finally:
        await producer.stop()
