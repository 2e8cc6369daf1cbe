"""`kai-stream processor`: run the faust scheduler processor (one worker of its consumer group)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from kai_stream.cli import app
from kai_stream.core.config import load_config


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
    from kai_stream.streams.__main__ import main

    main()
