"""The binder survives any bytes on the decisions topic: a 1 MB undecodable record with a 2 MB key is
dead-lettered (truncated, with the reason) instead of crashing the binder on the producer's size limit."""

from __future__ import annotations

from typing import Any, cast

from aiokafka import ConsumerRecord

from kai_stream.binder.runner import Binder
from kai_stream.core.events import DeadLetter
from kai_stream.kafka import make_producer, read_topic
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames


async def test_a_huge_undecodable_record_is_dead_lettered(kafka_settings: KafkaSettings, topics: TopicNames) -> None:
    producer = make_producer(kafka_settings)
    await producer.start()
    try:
        binder = Binder(cast(Any, None), producer, cast(Any, None), topics=topics)
        value = b"\xfe\xff" * 512 * 1024
        record: ConsumerRecord[bytes, bytes] = ConsumerRecord(
            topics.decisions, 0, 7, 1000, 0, b"k" * 2_000_000, value, None, 2_000_000, len(value), ()
        )
        assert await binder._decode(record) is None
    finally:
        await producer.stop()
    [stored] = await read_topic(kafka_settings, topics.dead_letter)
    letter = DeadLetter.model_validate_json(stored.value or b"")
    assert letter.truncated and letter.size == len(value) and "binder" in letter.reason and letter.offset == 7
    assert len(stored.value or b"") < 512 * 1024 and len(stored.key or b"") <= 253
