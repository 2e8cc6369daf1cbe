"""The embedded Tansu broker starts, answers Kafka clients, stops cleanly, keeps data in durable mode and
reports startup failures with its output."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from kai_stream import broker as broker_module
from kai_stream.broker import BrokerStartError, EmbeddedBroker, answers_metadata, free_port
from kai_stream.kafka import make_consumer, make_producer, read_topic
from kai_stream.settings import KafkaSettings


def test_memory_broker_answers_metadata_and_stops() -> None:
    embedded = EmbeddedBroker(memory=True)
    bootstrap = embedded.start()
    host, port = bootstrap.split(":")
    try:
        assert embedded.running
        assert answers_metadata(host, int(port))
    finally:
        embedded.stop()
    assert not embedded.running
    assert not answers_metadata(host, int(port), timeout_s=0.2)
    embedded.stop()


def test_occupied_port_is_refused_clearly() -> None:
    with EmbeddedBroker(memory=True) as first:
        taken = int(first.bootstrap_servers.split(":")[1])
        second = EmbeddedBroker(memory=True, port=taken, startup_timeout_s=3)
        with pytest.raises(BrokerStartError, match="already in use"):
            second.start()
        assert not second.running
        assert answers_metadata("127.0.0.1", taken)


def test_crashing_broker_reports_its_output_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "tansu"
    fake.write_text("#!/bin/sh\necho 'storage engine exploded' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(broker_module, "tansu_path", lambda: fake)
    with pytest.raises(BrokerStartError, match=r"(?s)exited with code 3.*storage engine exploded"):
        EmbeddedBroker(memory=True).start()


def test_missing_port_is_reported_not_hung() -> None:
    port = free_port()
    assert not answers_metadata("127.0.0.1", port, timeout_s=0.2)


async def _produce(settings: KafkaSettings, topic: str, values: list[bytes]) -> None:
    from kai_stream.topics import TopicNames, create_topics, load_specs

    spec = next(s for s in load_specs() if s.name == "dead-letter")
    await create_topics(settings, [spec], names=TopicNames(dead_letter=topic))
    producer = make_producer(settings)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()


async def _commit_first(settings: KafkaSettings, topic: str, group: str, n: int) -> None:
    consumer = make_consumer(settings, topic, group_id=group)
    await consumer.start()
    try:
        got: list[Any] = []
        while len(got) < n:
            batches = await consumer.getmany(timeout_ms=500, max_records=n - len(got))
            got.extend(r for rs in batches.values() for r in rs)
        await consumer.commit({TopicPartition(topic, 0): got[-1].offset + 1})
    finally:
        await consumer.stop()


async def _next_value(settings: KafkaSettings, topic: str, group: str) -> bytes:
    consumer = make_consumer(settings, topic, group_id=group)
    await consumer.start()
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=500, max_records=1)
            for records in batches.values():
                value: bytes = records[0].value
                return value
    finally:
        await consumer.stop()


async def test_durable_broker_keeps_records_and_group_offsets_across_restart(tmp_path: Path) -> None:
    values = [f"v{i}".encode() for i in range(5)]
    async with EmbeddedBroker(memory=False, data_dir=tmp_path, unsafe_durable=True) as first:
        settings = KafkaSettings(bootstrap_servers=first.bootstrap_servers, session_timeout_ms=2000,
                                 heartbeat_interval_ms=300)
        await _produce(settings, "durable", values)
        await _commit_first(settings, "durable", "g1", 2)
    assert (tmp_path / "s3" / "tansu").is_dir()
    async with EmbeddedBroker(memory=False, data_dir=tmp_path, unsafe_durable=True) as second:
        settings = KafkaSettings(bootstrap_servers=second.bootstrap_servers, session_timeout_ms=2000,
                                 heartbeat_interval_ms=300)
        records = await asyncio.wait_for(read_topic(settings, "durable"), 20)
        assert [r.value for r in records] == values
        assert await asyncio.wait_for(_next_value(settings, "durable", "g1"), 20) == b"v2"
