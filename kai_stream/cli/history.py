"""`kai-stream history-sink`: archive every topic to Parquet segments until interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from kai_stream.cli import app
from kai_stream.history.reader import ALL_TOPICS, DEFAULT_HISTORY_DIR
from kai_stream.history.sink import SinkStats, run_sink
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames


@app.command("history-sink")
def history_sink(
    directory: Annotated[Path, typer.Option("--dir", help="where the Parquet segments go")] = DEFAULT_HISTORY_DIR,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka bootstrap servers (default: KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS)")
    ] = None,
    topic_prefix: Annotated[str, typer.Option(help="topic name prefix of the deployment")] = "",
    group_id: Annotated[str, typer.Option(help="consumer group of this sink")] = "kai-stream-history-sink",
    segment_records: Annotated[int, typer.Option(min=1, help="rows per segment before it is flushed")] = 10_000,
    segment_seconds: Annotated[float, typer.Option(min=0.1, help="flush a segment at this age")] = 5.0,
) -> None:
    """Consume cluster-events, decisions, bind-results and dead-letter into DIR/<topic>/<partition>/."""
    settings = KafkaSettings.for_servers(bootstrap_servers)
    console = Console()

    async def main() -> SinkStats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        console.print(f"archiving {', '.join(ALL_TOPICS)} from {settings.bootstrap_servers} to {directory}")
        return await run_sink(
            settings,
            directory,
            ALL_TOPICS,
            stop,
            names=TopicNames.with_prefix(topic_prefix),
            group_id=group_id,
            segment_records=segment_records,
            segment_seconds=segment_seconds,
        )

    stats = asyncio.run(main())
    console.print(
        f"archived {stats.rows} rows in {stats.segments} segments "
        f"({stats.malformed} malformed kept, {stats.duplicates} duplicates dropped)"
    )
