"""Topic specs (``topics/*.yaml``), the JSON Schemas generated from the event models, and topic creation.

``python -m kai_stream.topics --write`` regenerates ``topics/schemas/``; ``--check`` exits 1 when the
committed schemas differ from what the models generate. ``create_topics`` applies the specs to a broker
(idempotent: topics that exist are left alone).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from kai_stream.internals import kafka_client
from kai_stream.kafka import make_admin
from kai_stream.settings import KafkaSettings
from kai_stream.topicspecs import TOPICS_DIR as TOPICS_DIR
from kai_stream.topicspecs import TopicSpec as TopicSpec
from kai_stream.topicspecs import load_specs as load_specs


@dataclass(frozen=True)
class TopicNames:
    """The actual topic names a deployment uses (a prefix isolates tests or tenants on one broker)."""

    cluster_events: str = "cluster-events"
    decisions: str = "decisions"
    bind_results: str = "bind-results"
    dead_letter: str = "dead-letter"

    @classmethod
    def with_prefix(cls, prefix: str) -> TopicNames:
        base = cls()
        return cls(
            cluster_events=prefix + base.cluster_events,
            decisions=prefix + base.decisions,
            bind_results=prefix + base.bind_results,
            dead_letter=prefix + base.dead_letter,
        )

    def resolve(self, spec_name: str) -> str:
        return {
            "cluster-events": self.cluster_events,
            "decisions": self.decisions,
            "bind-results": self.bind_results,
            "dead-letter": self.dead_letter,
        }.get(spec_name, spec_name)


DEFAULT_TOPICS = TopicNames()


def render_schema(spec: TopicSpec) -> str:
    return json.dumps(spec.json_schema(), indent=2, sort_keys=True) + "\n"


def generate_schemas(directory: Path = TOPICS_DIR) -> dict[Path, str]:
    """The schema file each spec names, mapped to the text the models generate now."""
    return {directory / spec.schema_file: render_schema(spec) for spec in load_specs(directory)}


def drifted_schemas(directory: Path = TOPICS_DIR) -> list[Path]:
    """Schema files that are missing or differ from what the models generate."""
    return [
        path
        for path, text in generate_schemas(directory).items()
        if not path.is_file() or path.read_text() != text
    ]


def write_schemas(directory: Path = TOPICS_DIR) -> list[Path]:
    """Rewrite the schema files that drifted; return them."""
    changed = drifted_schemas(directory)
    generated = generate_schemas(directory)
    for path in changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(generated[path])
    return changed


async def create_topics(
    settings: KafkaSettings,
    specs: list[TopicSpec] | None = None,
    *,
    names: TopicNames = DEFAULT_TOPICS,
    replication_factor: int = 1,
) -> list[str]:
    """Create the topics that do not exist yet; return the names created (existing topics are fine)."""
    specs = load_specs() if specs is None else specs
    admin = make_admin(settings)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(
                name=names.resolve(spec.name),
                num_partitions=spec.partitions,
                replication_factor=replication_factor,
                topic_configs=spec.configs(),
            )
            for spec in specs
            if names.resolve(spec.name) not in existing
        ]
        created: list[str] = []
        for topic in missing:
            try:
                await admin.create_topics([topic])
            except TopicAlreadyExistsError:
                continue
            created.append(topic.name)
        await _until_led(admin, {t.name: t.num_partitions for t in missing})
        return created
    finally:
        await admin.close()


def _led(leader: int | None) -> bool:
    return leader is not None and leader >= 0


async def _until_led(admin: AIOKafkaAdminClient, partitions: dict[str, int], timeout_s: float = 30.0) -> None:
    """Wait until the broker's metadata lists every partition of the new topics with a leader: Apache Kafka answers
    CreateTopics before its metadata cache has them, and a client that looks then sees no such topic."""
    deadline = time.monotonic() + timeout_s
    while partitions:
        cluster: Any = await kafka_client(admin).fetch_all_metadata()
        led = {
            name
            for name, count in partitions.items()
            if len(cluster.partitions_for_topic(name) or ()) == count
            and all(_led(cluster.leader_for_partition(TopicPartition(name, p))) for p in range(count))
        }
        if led == set(partitions):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics {sorted(set(partitions) - led)} have no leader after {timeout_s:.0f}s")
        await asyncio.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kai_stream.topics", description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the JSON Schemas from the models")
    mode.add_argument("--check", action="store_true", help="exit 1 if the committed schemas drifted")
    parser.add_argument("--dir", type=Path, default=TOPICS_DIR, help="the topics/ directory")
    args = parser.parse_args(argv)
    if args.write:
        for path in write_schemas(args.dir):
            print(f"wrote {path}")
        return 0
    drifted = drifted_schemas(args.dir)
    for path in drifted:
        print(f"drifted: {path} (run: python -m kai_stream.topics --write)", file=sys.stderr)
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())
