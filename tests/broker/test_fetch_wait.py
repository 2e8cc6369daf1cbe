"""The adaptive fetch wait (kai_stream/fetchwait.py): its rule on fetch responses, and on the real broker a
consumer with a 1 ms wait reading a partition of 8,000 one-record batches (Tansu answers each such fetch
empty, so without the governor the read never ends)."""

from __future__ import annotations

import asyncio
import struct
import time
from types import SimpleNamespace

import pytest

from kai_stream.fetchwait import FetchWaitGovernor
from kai_stream.kafka import assign_from_start, make_consumer, make_producer, read_to_end
from kai_stream.settings import KafkaSettings


def fetch(offset: int) -> SimpleNamespace:
    return SimpleNamespace(topics=[("t", [(0, offset, 1 << 20)])])


def answer(highwater: int, records: bytes | None, error_code: int = 0) -> SimpleNamespace:
    return SimpleNamespace(topics=[("t", [(0, error_code, highwater, highwater, None, records)])])


def test_starved_answers_in_a_row_double_the_wait_up_to_the_limit() -> None:
    governor = FetchWaitGovernor(5, 50)
    waits = []
    for _ in range(6):
        governor.observe(fetch(10), answer(100, None))
        waits.append(governor.wait_ms)
    assert waits == [5, 10, 20, 40, 50, 50]
    assert governor.starved == 6


def test_one_starved_answer_between_answers_with_records_keeps_the_wait() -> None:
    governor = FetchWaitGovernor(5, 50)
    for _ in range(3):
        governor.observe(fetch(10), answer(100, None))
        governor.observe(fetch(10), answer(100, b"batch"))
    assert governor.wait_ms == 5


def test_records_shrink_the_wait_and_caught_up_resets_it() -> None:
    governor = FetchWaitGovernor(5, 1000)
    for _ in range(7):
        governor.observe(fetch(10), answer(100, None))
    assert governor.wait_ms == 320
    governor.observe(fetch(10), answer(100, b"batch"))
    assert governor.wait_ms == 288
    governor.observe(fetch(100), answer(100, None))
    assert governor.wait_ms == 5


def test_error_answers_change_nothing() -> None:
    governor = FetchWaitGovernor(5)
    governor.observe(fetch(10), answer(100, None, error_code=1))
    assert (governor.wait_ms, governor.starved) == (5, 0)


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="base_ms"):
        FetchWaitGovernor(100, 10)


async def test_consumer_with_a_tiny_wait_reads_a_partition_of_many_small_batches(
    kafka_settings: KafkaSettings, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}small-batches"
    records = 8000
    producer = make_producer(kafka_settings, linger_ms=0)
    await producer.start()
    try:
        for i in range(records):
            await (await producer.send(topic, str(i).encode(), partition=0))
    finally:
        await producer.stop()
    settings = kafka_settings.model_copy(update={"fetch_max_wait_ms": 1})
    consumer = make_consumer(settings, group_id=None)
    await consumer.start()
    try:
        await assign_from_start(consumer, topic)
        started = time.monotonic()
        got = await asyncio.wait_for(read_to_end(consumer, timeout_s=60), 90)
        elapsed = time.monotonic() - started
    finally:
        await consumer.stop()
    assert [int(r.value) for r in got if r.value is not None] == list(range(records))
    assert elapsed < 30, elapsed


def v2_batches(base: int, count: int) -> bytes:
    """``count`` one-record batch headers (format v2 layout) from offset ``base``."""
    out = b""
    for offset in range(base, base + count):
        rest = struct.pack(">iBIhi", 0, 2, 0, 0, 0) + bytes(34)
        out += struct.pack(">qi", offset, len(rest)) + rest
    return out


def test_answers_behind_the_end_grow_the_wait_to_the_behind_limit_and_the_end_resets_it() -> None:
    governor = FetchWaitGovernor(5, 2000, behind_max_ms=50)
    waits = []
    for offset in range(10, 70, 10):
        governor.observe(fetch(offset), answer(1000, v2_batches(offset, 10)))
        waits.append(governor.wait_ms)
    assert waits == [5, 10, 20, 40, 50, 50]
    assert governor.behind == 6
    governor.observe(fetch(70), answer(80, v2_batches(70, 10)))  # reached the high-watermark
    assert governor.wait_ms == 5


def test_one_answer_behind_between_answers_at_the_end_keeps_the_wait() -> None:
    governor = FetchWaitGovernor(5, 2000)
    for offset in range(10, 70, 20):
        governor.observe(fetch(offset), answer(offset + 11, v2_batches(offset, 10)))
        governor.observe(fetch(offset + 10), answer(offset + 20, v2_batches(offset + 10, 10)))
    assert governor.wait_ms == 5


def test_a_wait_grown_by_starved_answers_shrinks_on_answers_behind_down_to_the_behind_limit() -> None:
    governor = FetchWaitGovernor(5, 1000, behind_max_ms=50)
    for _ in range(7):
        governor.observe(fetch(10), answer(1000, None))
    assert governor.wait_ms == 320
    governor.observe(fetch(10), answer(1000, v2_batches(10, 10)))
    assert governor.wait_ms == 288
    for offset in range(20, 400, 10):
        governor.observe(fetch(offset), answer(1000, v2_batches(offset, 10)))
    assert governor.wait_ms == 50
