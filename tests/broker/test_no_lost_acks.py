"""The product never runs on a storage mode that loses acknowledged writes: the embedded broker's default
(memory) keeps every record two concurrent producers had acknowledged on one partition, and the durable s3 mode,
which does not, is refused unless explicitly allowed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from kai_stream.broker import EmbeddedBroker, UnsafeStorageError
from kai_stream.kafka import make_producer, read_topic
from kai_stream.settings import KafkaSettings
from tests.broker.admin import create_topic

from .test_cli import _run_until

PRODUCERS = 3
PER_PRODUCER = 600


async def _produce(settings: KafkaSettings, topic: str, name: str) -> list[tuple[int, bytes]]:
    producer = make_producer(settings, linger_ms=2)
    await producer.start()
    acked: list[tuple[int, bytes]] = []
    try:
        deliveries = []
        for i in range(PER_PRODUCER):
            value = f"{name}-{i}".encode()
            deliveries.append((value, await producer.send(topic, value, key=b"default", partition=0)))
            if i % 50 == 0:
                await asyncio.sleep(0)
        for value, delivery in deliveries:
            metadata = await delivery
            acked.append((metadata.offset, value))
    finally:
        await producer.stop()
    return acked


async def test_every_acknowledged_record_survives_concurrent_producers_on_the_default_broker() -> None:
    async with EmbeddedBroker() as broker:
        assert broker.memory
        settings = KafkaSettings(bootstrap_servers=broker.bootstrap_servers)
        await create_topic(settings, "shared")
        results = await asyncio.gather(*(_produce(settings, "shared", f"p{n}") for n in range(PRODUCERS)))
        acked = [item for result in results for item in result]
        assert len(acked) == PRODUCERS * PER_PRODUCER
        records = await asyncio.wait_for(read_topic(settings, "shared"), 60)
        stored = {(r.offset, r.value) for r in records}
        lost = [item for item in acked if item not in stored]
        assert lost == [], f"{len(lost)} acknowledged records lost"
        offsets = sorted(r.offset for r in records)
        assert offsets == list(range(len(acked)))  # no holes


def test_the_unsafe_durable_mode_is_refused_unless_allowed() -> None:
    with pytest.raises(UnsafeStorageError, match="loses acknowledged records"):
        EmbeddedBroker(memory=False)
    EmbeddedBroker(memory=False, unsafe_durable=True)  # explicit: constructed, not started


def test_the_cli_defaults_to_memory_and_refuses_durable_run() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    refused = subprocess.run(
        [sys.executable, "-c", "from kai_stream.cli import main; main()", "run", "--durable", "--duration", "1"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert refused.returncode == 2 and "loses acknowledged records" in refused.stderr.replace("\n", " ")


def test_the_broker_command_defaults_to_memory() -> None:
    code, output = _run_until(["broker", "--no-topics"], "Ctrl-C")
    assert code == 0, output
    assert "storage=memory" in output
