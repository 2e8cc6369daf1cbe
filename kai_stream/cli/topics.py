"""`kai-stream topics create|check`: apply the topic specs to a broker; check the schemas are current."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from kai_stream.cli import app
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames, create_topics, drifted_schemas, load_specs

topics_app = typer.Typer(no_args_is_help=True, help="Topic specs and schemas")
app.add_typer(topics_app, name="topics")


@topics_app.command("create")
def create(
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka bootstrap servers (default: KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS)")
    ] = None,
    replication_factor: Annotated[int, typer.Option(help="replicas per partition (real Kafka: 3)")] = 1,
    prefix: Annotated[str, typer.Option(help="prefix every topic name")] = "",
) -> None:
    """Create the topics from topics/*.yaml; topics that already exist are left as they are."""
    settings = KafkaSettings.for_servers(bootstrap_servers)
    specs = load_specs()
    names = TopicNames.with_prefix(prefix)
    created = set(asyncio.run(create_topics(settings, specs, names=names, replication_factor=replication_factor)))
    table = Table("topic", "partitions", "retention.ms", "key", "status")
    for spec in specs:
        name = names.resolve(spec.name)
        status = "created" if name in created else "exists"
        table.add_row(name, str(spec.partitions), str(spec.retention_ms), spec.key, status)
    Console().print(table)


@topics_app.command("check")
def check() -> None:
    """Fail when topics/schemas/ differs from the models (fix: python -m kai_stream.topics --write)."""
    drifted = drifted_schemas()
    for path in drifted:
        Console(stderr=True).print(f"[red]drifted:[/red] {path}")
    if drifted:
        raise typer.Exit(1)
    Console().print("schemas match the models")
