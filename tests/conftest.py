"""Shared fixtures: one real embedded Tansu broker (memory storage) for the whole session, Kafka settings
tuned for fast local group joins, and per-test topics with a unique prefix (so tests never share data).

``engine`` parametrizes a test over both embedded engines: Tansu (``broker``) and Apache Kafka
(``kafka_broker``: one JVM for the whole session, started on first use, its jars fetched with Maven if missing).

    async def test_x(kafka_settings: KafkaSettings, topics: TopicNames) -> None:
        producer = make_producer(kafka_settings) ...  # topics.decisions, topics.cluster_events, ...
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from kai_stream.broker import EmbeddedBroker
from kai_stream.core.scheduler import prefer_sources
from kai_stream.engines import ENGINES, Engine
from kai_stream.kafka_engine import KafkaBroker
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames, create_topics
from tests.engines import EngineUnderTest

prefer_sources()
"""In-process tests run the scheduler from its sources: white-box tests patch and spy on internals, which the
compiled modules call directly. Subprocesses (processor, CLI) run the compiled build; tests/core/test_compiled.py
checks that it decides as the sources do."""


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """Bootstrap servers of a real Tansu broker (memory://) on a free loopback port, shared by the session."""
    embedded = EmbeddedBroker(memory=True)
    embedded.start()
    try:
        yield embedded.bootstrap_servers
    finally:
        embedded.stop()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[str]:
    """Bootstrap servers of a real Apache Kafka broker (KRaft, temp log dir), shared by the session;
    ``KAI_STREAM_TEST_KAFKA=host:port`` uses a running one instead (e.g. ``kai-stream broker --engine kafka``)."""
    external = os.environ.get("KAI_STREAM_TEST_KAFKA")
    if external:
        yield external
        return
    embedded = KafkaBroker(memory=True, startup_timeout_s=240)
    embedded.start()
    try:
        yield embedded.bootstrap_servers
    finally:
        embedded.stop()


@pytest.fixture(scope="session")
def secure_kafka() -> Iterator[KafkaSettings]:
    """Client settings of an Apache Kafka broker whose client listener is SASL_SSL (SCRAM-SHA-512 user, throwaway
    CA: ``kafka_engine.KafkaBroker(secure=True)``), started on first use and shared by the session."""
    embedded = KafkaBroker(memory=True, startup_timeout_s=240, secure=True)
    embedded.start()
    try:
        yield embedded.client_settings(client_id="kai-stream-test", session_timeout_ms=2000, heartbeat_interval_ms=300)
    finally:
        embedded.stop()


def settings_for(bootstrap_servers: str) -> KafkaSettings:
    """Short session timeout because Tansu holds joins for half of it (Kafka's group minimum is lowered to fit)."""
    return KafkaSettings(
        bootstrap_servers=bootstrap_servers,
        client_id="kai-stream-test",
        session_timeout_ms=2000,
        heartbeat_interval_ms=300,
    )


@pytest.fixture
def kafka_settings(broker: str) -> KafkaSettings:
    """Settings for the session Tansu broker."""
    return settings_for(broker)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> EngineUnderTest:
    """The test runs once per engine, against that engine's session broker."""
    name: Engine = request.param
    servers: str = request.getfixturevalue("kafka_broker" if name == "kafka" else "broker")
    return EngineUnderTest(name=name, settings=settings_for(servers))


@pytest.fixture
def topic_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}-"


@pytest.fixture
async def topics(kafka_settings: KafkaSettings, topic_prefix: str) -> TopicNames:
    """The four kai-stream topics, created fresh for this test under a unique prefix."""
    names = TopicNames.with_prefix(topic_prefix)
    created = await create_topics(kafka_settings, names=names)
    assert len(created) == 4, created
    return names
