"""Creating one topic with the given partitions and configs, for the broker tests (the project's own topics come
from ``kai_stream.topics.create_topics``)."""

from __future__ import annotations

from aiokafka.admin import NewTopic

from kai_stream.kafka import make_admin
from kai_stream.settings import KafkaSettings


async def create_topic(
    settings: KafkaSettings, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    admin = make_admin(settings)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    finally:
        await admin.close()
