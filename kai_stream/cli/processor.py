"""`kai-stream processor`: run the faust scheduler processor (one worker of its consumer group)."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kai_stream.cli import app
from kai_stream.core.config import load_config

if TYPE_CHECKING:
    from kai_stream.settings import KafkaSettings


@app.command()
def processor(
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka bootstrap servers (default: KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS)")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="scheduler config (YAML)")] = None,
    topic_prefix: Annotated[str | None, typer.Option(help="prefix of the topic names")] = None,
    app_id: Annotated[str | None, typer.Option(help="faust app id = Kafka consumer group")] = None,
) -> None:
    """Fold cluster-events per pool, run the scheduler, publish decisions; instances share pools via Kafka."""
    if config is not None:
        load_config(config)
    overrides = {
        "KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS": bootstrap_servers,
        "KAI_STREAM_PROCESSOR_CONFIG_PATH": str(config) if config is not None else None,
        "KAI_STREAM_PROCESSOR_TOPIC_PREFIX": topic_prefix,
        "KAI_STREAM_PROCESSOR_APP_ID": app_id,
    }
    for name, value in overrides.items():
        if value is not None:
            os.environ[name] = value
    _preflight()
    from kai_stream.streams.__main__ import main

    main()


def _preflight() -> None:
    """What faust would only report as a crash with a traceback: a health port in use, no broker to reach."""
    from kai_stream.cli.errors import UserError
    from kai_stream.observability import HealthSettings
    from kai_stream.settings import KafkaSettings

    health = HealthSettings()
    port = health.port_for("processor")
    if health.enabled and port != 0:
        with socket.socket() as probe:
            try:
                probe.bind((health.host, port))
            except OSError as exc:
                raise UserError(
                    f"health port {health.host}:{port} of the processor: {exc.strerror}; "
                    "set KAI_STREAM_HEALTH_PORT (another port; 0: none) or stop what listens there"
                ) from None
    asyncio.run(_reach(KafkaSettings()))


async def _reach(settings: KafkaSettings) -> None:
    from kai_stream.kafka import make_admin

    admin = make_admin(settings)
    try:
        await admin.start()
    finally:
        await admin.close()
