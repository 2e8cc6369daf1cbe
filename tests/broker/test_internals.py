"""``kai_stream/internals.py`` against the pinned aiokafka and a real broker: the group member id a consumer holds
(what ``succession.py`` removes after a kill). The fetch wait is covered by ``test_fetch_wait.py``, the commit and
the faust producer by the processor's tests (``tests/e2e``), ``expedite`` by ``test_expedite.py``."""

from __future__ import annotations

import time

from kai_stream.internals import member_id
from kai_stream.kafka import make_consumer
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames


async def test_member_id_is_the_one_the_group_gave_the_consumer(
    kafka_settings: KafkaSettings, topics: TopicNames, topic_prefix: str
) -> None:
    consumer = make_consumer(kafka_settings, topics.decisions, group_id=f"{topic_prefix}members")
    assert member_id(consumer) == ""
    await consumer.start()
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=100)
        assert consumer.assignment()
        assert member_id(consumer).startswith(kafka_settings.client_id)
    finally:
        await consumer.stop()
