"""Every record the broker acknowledged survives a kill -9 of the broker: three producers write one partition
concurrently, the Apache Kafka engine (its log on disk) is killed with SIGKILL while they write and started again
on its port and data, the producers send what failed again, and every acknowledged record is read back (the
embedded Tansu broker keeps its log in memory, which dies with it, and its durable mode is refused:
test_no_lost_acks.py)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from kai_stream.broker import free_port
from kai_stream.kafka import make_producer, read_topic
from kai_stream.kafka_engine import KafkaBroker
from kai_stream.settings import KafkaSettings
from tests.broker.admin import create_topic

PRODUCERS = 3
PER_PRODUCER = 300


async def _produce(settings: KafkaSettings, name: str, acked: list[tuple[int, bytes]]) -> None:
    """Send records one by one, each again after a failure, until acknowledged."""
    producer = make_producer(settings, request_timeout_ms=5000, retry_backoff_ms=200)
    await producer.start()
    try:
        for i in range(PER_PRODUCER):
            value = f"{name}-{i}".encode()
            while True:
                try:
                    metadata = await producer.send_and_wait("shared", value, partition=0)
                    break
                except Exception:  # the broker is down: send it again
                    await asyncio.sleep(0.3)
            acked.append((metadata.offset, value))
    finally:
        await producer.stop()


@pytest.mark.kafka
async def test_every_acknowledged_record_survives_a_broker_kill(tmp_path: Path) -> None:
    port = free_port()
    broker = KafkaBroker(memory=False, port=port, data_dir=tmp_path, startup_timeout_s=300)
    await asyncio.to_thread(broker.start)
    try:
        settings = KafkaSettings(bootstrap_servers=broker.bootstrap_servers)
        await create_topic(settings, "shared")
        acked: list[tuple[int, bytes]] = []
        producers = asyncio.gather(*(_produce(settings, f"p{n}", acked) for n in range(PRODUCERS)))
        while len(acked) < PRODUCERS * PER_PRODUCER // 3:
            await asyncio.sleep(0.01)
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGKILL)
        killed_after = len(acked)
        await asyncio.to_thread(broker.stop)
        broker = KafkaBroker(memory=False, port=port, data_dir=tmp_path, startup_timeout_s=300)
        await asyncio.to_thread(broker.start)
        await asyncio.wait_for(producers, 300)
        assert killed_after < len(acked) == PRODUCERS * PER_PRODUCER
        stored = {(r.offset, r.value) for r in await read_topic(settings, "shared", timeout_s=60)}
        lost = [item for item in acked if item not in stored]
        assert lost == [], f"{len(lost)} acknowledged records lost (of {len(acked)}; {killed_after} before the kill)"
    finally:
        await asyncio.to_thread(broker.stop)
