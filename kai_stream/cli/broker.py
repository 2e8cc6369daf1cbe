"""`kai-stream broker`: run an embedded broker (Tansu or Apache Kafka) in the foreground until Ctrl-C; with
``--secure`` (Apache Kafka only) its client listener is SASL_SSL, and it prints the client settings to export."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from kai_stream.broker import DEFAULT_DATA_DIR, UNSAFE_DURABLE, BrokerStartError
from kai_stream.cli import app
from kai_stream.cli.broker_options import EngineOption, SecureOption
from kai_stream.engines import embedded_broker
from kai_stream.topics import create_topics


@app.command()
def broker(
    memory: Annotated[bool, typer.Option("--memory", help="volatile in-memory storage (the default)")] = True,
    unsafe_durable_s3: Annotated[
        bool,
        typer.Option(
            "--unsafe-durable-s3",
            help="durable s3 storage under --data-dir: loses acknowledged records with two producers on a "
            "partition (experiments only; use a real Kafka for durability)",
        ),
    ] = False,
    port: Annotated[int | None, typer.Option(help="listen port on 127.0.0.1 (default: a free one)")] = None,
    data_dir: Annotated[Path, typer.Option(help="durable data directory")] = DEFAULT_DATA_DIR,
    topics: Annotated[bool, typer.Option(help="create the kai-stream topics once the broker is up")] = True,
    engine: EngineOption = "tansu",
    secure: SecureOption = False,
) -> None:
    """Run an embedded Kafka-protocol broker until interrupted."""
    console = Console(stderr=True)
    memory = not unsafe_durable_s3
    if unsafe_durable_s3:
        console.print(f"[yellow]warning:[/yellow] {UNSAFE_DURABLE}")
    embedded = embedded_broker(
        engine, memory=memory, port=port, data_dir=data_dir, unsafe_durable=unsafe_durable_s3, secure=secure
    )
    try:
        bootstrap = embedded.start()
    except BrokerStartError as exc:
        console.print(f"[red]broker failed to start:[/red] {exc}")
        raise typer.Exit(1) from exc
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        storage = "memory" if memory else f"durable ({data_dir.resolve()})"
        client = embedded.client_settings()
        console.print(
            f"broker ready: [bold]{bootstrap}[/bold] engine={engine} storage={storage} "
            f"security={client.security_protocol}"
        )
        if topics:
            created = asyncio.run(create_topics(client))
            console.print(f"topics created: {', '.join(created) or 'none (all existed)'}")
        exports = client.client_env() if secure else {"KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS": bootstrap}
        for name, value in exports.items():
            console.print(f"export {name}={value}", highlight=False, soft_wrap=True)
        console.print("(Ctrl-C to stop)")
        while not stop.wait(0.5):
            if not embedded.running:
                console.print("[red]broker exited unexpectedly:[/red]\n" + embedded.output_tail())
                raise typer.Exit(1)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        embedded.stop()
        console.print("broker stopped")
