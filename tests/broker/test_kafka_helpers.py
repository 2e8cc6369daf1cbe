"""Producer/consumer helpers against the real broker: pool routing, reading to the fetch high-watermark,
idempotent topic creation."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition
from aiokafka.partitioner import DefaultPartitioner

from kai_stream.core.events import DeadLetter, Tick, loads_cluster_event
from kai_stream.kafka import make_admin, make_consumer, make_producer, partition_for, publish, read_to_end, read_topic
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames, create_topics, load_specs


def test_partition_for_is_kafkas_key_hash_and_stable() -> None:
    pools = [f"pool-{i}" for i in range(50)] + ["default", "a100", ""]
    for pool in pools:
        for n in (1, 3, 8):
            expected = DefaultPartitioner()(pool.encode(), list(range(n)), [])
            assert partition_for(pool, n) == expected
    assert partition_for("default", 8) == partition_for("default", 8)
    assert len({partition_for(p, 8) for p in pools}) == 8
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for("x", 0)


def test_kafka_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS", "k1:9093,k2:9093")
    monkeypatch.setenv("KAI_STREAM_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("KAI_STREAM_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("KAI_STREAM_KAFKA_SASL_USERNAME", "u")
    monkeypatch.setenv("KAI_STREAM_KAFKA_SASL_PASSWORD", "secret")
    settings = KafkaSettings()
    kwargs = settings.client_kwargs()
    assert kwargs["bootstrap_servers"] == "k1:9093,k2:9093"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_password"] == "secret"
    assert "secret" not in repr(settings)
    monkeypatch.setenv("KAI_STREAM_KAFKA_SECURITY_PROTOCOL", "BOGUS")
    with pytest.raises(ValueError, match="security_protocol"):
        KafkaSettings()


async def test_topics_create_is_idempotent(kafka_settings: KafkaSettings, topics: TopicNames) -> None:
    assert await create_topics(kafka_settings, names=topics) == []
    partitions = await _partitions(kafka_settings, topics.cluster_events)
    spec = next(s for s in load_specs() if s.name == "cluster-events")
    assert partitions == spec.partitions


async def _partitions(settings: KafkaSettings, topic: str) -> int:
    consumer = make_consumer(settings, group_id=None)
    await consumer.start()
    try:
        await consumer.topics()
        return len(consumer.partitions_for_topic(topic) or ())
    finally:
        await consumer.stop()


async def test_publish_routes_by_pool_and_read_topic_reaches_the_end(
    kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    producer = make_producer(kafka_settings)
    await producer.start()
    try:
        for i in range(6):
            pool = ["a", "b", "c"][i % 3]
            await publish(producer, topics.cluster_events, Tick(event_id=f"e{i}", ts=float(i), pool=pool), pool=pool)
    finally:
        await producer.stop()
    records = await asyncio.wait_for(read_topic(kafka_settings, topics.cluster_events), 20)
    assert len(records) == 6
    for record in records:
        event = loads_cluster_event(record.value)
        assert record.partition == partition_for(event.pool, 8)
        assert record.key == event.pool.encode()
    by_pool = [loads_cluster_event(r.value).event_id for r in records if loads_cluster_event(r.value).pool == "a"]
    assert by_pool == ["e0", "e3"]


async def test_read_to_end_stops_at_high_watermark_of_a_group_consumer(
    kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    topic = topics.dead_letter
    producer = make_producer(kafka_settings)
    await producer.start()
    try:
        for i in range(3):
            letter = DeadLetter.from_raw(topic="x", partition=0, offset=i, key=None, value=b"\xff", reason="r", ts=0)
            await publish(producer, topic, letter, pool="default")
    finally:
        await producer.stop()
    consumer = make_consumer(kafka_settings, topic, group_id=f"{topic}-g")
    await consumer.start()
    try:
        first = await asyncio.wait_for(read_to_end(consumer), 20)
        assert [r.offset for r in first] == [0, 1, 2]
        assert consumer.highwater(TopicPartition(topic, 0)) == 3
        again = await asyncio.wait_for(read_to_end(consumer), 20)
        assert again == []
    finally:
        await consumer.stop()


async def test_read_topic_on_missing_topic_names_it(kafka_settings: KafkaSettings) -> None:
    with pytest.raises(LookupError, match="no-such-topic"):
        await read_topic(kafka_settings, "no-such-topic")


async def test_tls_and_sasl_settings_reach_every_client_factory() -> None:
    settings = KafkaSettings(
        bootstrap_servers="k:9093", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
        sasl_username="u", sasl_password="p",
    )
    kwargs = settings.client_kwargs()
    assert kwargs["ssl_context"] is not None and kwargs["security_protocol"] == "SASL_SSL"
    producer = make_producer(settings)
    consumer = make_consumer(settings, "t", group_id="g")
    admin = make_admin(settings)
    try:
        assert producer.client._security_protocol == "SASL_SSL"
        assert consumer._client._sasl_mechanism == "SCRAM-SHA-512"
        assert admin._client._ssl_context is not None
        assert KafkaSettings().ssl_context() is None
    finally:
        await producer.stop()
        await consumer.stop()
        await admin.close()
