"""The Tansu workarounds run only on Tansu: the engine is detected from the broker's API versions (or configured),
and on Apache Kafka consumers are plain aiokafka consumers and producers hold nothing back."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from kai_stream.broker import free_port
from kai_stream.kafka import make_consumer, make_producer, read_topic
from kai_stream.quirks import broker_engine, detect_engine, feedback_linger_ms, tansu_workarounds
from kai_stream.settings import KafkaSettings
from tests.broker.admin import create_topic
from tests.engines import EngineUnderTest

pytestmark = pytest.mark.kafka


def test_the_engine_is_detected(engine: EngineUnderTest) -> None:
    assert detect_engine(engine.settings) == engine.name
    assert broker_engine(engine.settings) == engine.name
    assert tansu_workarounds(engine.settings) is not engine.is_kafka


def test_a_configured_engine_wins_over_detection(engine: EngineUnderTest) -> None:
    other = "tansu" if engine.is_kafka else "kafka"
    configured = engine.settings.model_copy(update={"engine": other})
    assert broker_engine(configured) == other


def test_no_answer_keeps_the_workarounds_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    settings = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}")
    with caplog.at_level(logging.WARNING, logger="kai_stream.quirks"):
        assert broker_engine(settings) == "tansu"
    assert "applying the Tansu workarounds" in caplog.text


async def test_consumers_and_producers_follow_the_engine(engine: EngineUnderTest) -> None:
    consumer = make_consumer(engine.settings, group_id=None)
    patched = "send" in vars(consumer._client)  # the fetch governor and the hole guard wrap the client's send
    assert patched is not engine.is_kafka
    assert feedback_linger_ms(engine.settings) == (0 if engine.is_kafka else engine.settings.feedback_linger_ms)


async def test_a_compacted_topic_reads_without_waiting_on_its_holes(engine: EngineUnderTest) -> None:
    """Compaction leaves offsets that are never fetched again. The Tansu hole guard would wait
    ``fetch_hole_patience_s`` at each (it cannot tell them from Tansu's late batches); on Kafka no guard runs and
    ``read_topic`` reads the compacted log at once. Tansu does not compact, so there the whole log reads at once."""
    topic = f"holes-{uuid.uuid4().hex[:8]}"
    settings = engine.settings.model_copy(update={"fetch_hole_patience_s": 30.0})
    configs = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}
    await create_topic(settings, topic, configs=configs)
    producer = make_producer(settings)
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait(topic, f"{i}".encode(), key=f"k{i % 2}".encode(), partition=0)
        await asyncio.sleep(0.3)
        await producer.send_and_wait(topic, b"last", key=b"roll", partition=0)
    finally:
        await producer.stop()
    if engine.is_kafka:
        assert await _compacted(settings, topic)
    started = time.monotonic()
    offsets = [r.offset for r in await read_topic(settings, topic, timeout_s=60)]
    assert time.monotonic() - started < 10
    assert offsets == ([8, 9, 10] if engine.is_kafka else list(range(11)))


async def _compacted(settings: KafkaSettings, topic: str) -> bool:
    """Wait (up to 30 s) until the log starts at offset 8 for a plain consumer."""
    consumer = AIOKafkaConsumer(**settings.client_kwargs(), enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            await consumer.seek_to_beginning(tp)
            batches = await consumer.getmany(tp, timeout_ms=500, max_records=1)
            if batches.get(tp) and batches[tp][0].offset == 8:
                return True
            await asyncio.sleep(0.3)
        return False
    finally:
        await consumer.stop()


async def test_a_consumer_at_the_log_end_waits_long_on_kafka_yet_gets_a_record_at_once(engine: EngineUnderTest) -> None:
    """On Kafka a long-lived consumer's fetch waits ``fetch_max_wait_kafka_ms`` (few requests while idle), which
    costs no latency because Kafka answers a waiting fetch as soon as a record arrives; a read to the end of an
    empty topic keeps a short wait, or it would last the whole wait. On Tansu the short wait stays."""
    settings = engine.settings.model_copy(update={"fetch_max_wait_kafka_ms": 10_000})
    topic = f"wait-{uuid.uuid4().hex[:8]}"
    await create_topic(settings, topic)
    started = time.monotonic()
    assert await read_topic(settings, topic, timeout_s=30) == []
    assert time.monotonic() - started < 5
    consumer = make_consumer(settings, group_id=None)
    assert consumer._fetch_max_wait_ms == (10_000 if engine.is_kafka else settings.fetch_max_wait_ms)
    producer = make_producer(settings)
    await consumer.start()
    await producer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        assert await consumer.getmany(timeout_ms=1000) == {}  # a fetch is now waiting at the end
        sent = time.monotonic()
        await producer.send_and_wait(topic, b"x", partition=0)
        got: list[object] = []
        while not got and time.monotonic() - sent < 10:
            got = [r for records in (await consumer.getmany(timeout_ms=100)).values() for r in records]
        assert len(got) == 1
        assert time.monotonic() - sent < 5
    finally:
        await producer.stop()
        await consumer.stop()
