"""Shared fixtures: one real embedded Tansu broker (memory storage) for the whole session, Kafka settings
tuned for fast local group joins, and per-test topics with a unique prefix (so tests never share data).

    async def test_x(kafka_settings: KafkaSettings, topics: TopicNames) -> None:
        producer = make_producer(kafka_settings) ...  # topics.decisions, topics.cluster_events, ...
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kai_stream.broker import EmbeddedBroker
from kai_stream.core.scheduler import prefer_sources
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames, create_topics

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


@pytest.fixture
def kafka_settings(broker: str) -> KafkaSettings:
    """Settings for the session broker; short session timeout because Tansu holds joins for half of it."""
    return KafkaSettings(
        bootstrap_servers=broker,
        client_id="kai-stream-test",
        session_timeout_ms=2000,
        heartbeat_interval_ms=300,
    )


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
