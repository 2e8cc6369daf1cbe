"""`kai-stream replay`: rebuild every recorded decision and compare bytes; with `--config`, a what-if run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from kai_stream.cli import app
from kai_stream.cli.errors import source_message
from kai_stream.core.config import SchedulerConfig, load_config
from kai_stream.history.reader import SOURCE_ERRORS, History, open_history
from kai_stream.replay.report import render_replay, render_whatif
from kai_stream.replay.runner import replay_history
from kai_stream.replay.whatif import load_whatif, run_whatif

FromHistory = Annotated[
    Path | None, typer.Option("--from-history", help="Parquet history directory (default: .kai-stream/history)")
]
Bootstrap = Annotated[
    str | None,
    typer.Option(help="read the log from this broker instead (default: KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS)"),
]
Prefix = Annotated[str, typer.Option(help="topic name prefix of the deployment")]


@app.command("replay")
def replay(
    from_history: FromHistory = None,
    bootstrap_servers: Bootstrap = None,
    topic_prefix: Prefix = "",
    config: Annotated[
        Path | None,
        typer.Option("--config", help="what-if: re-simulate under this config / these Queue manifests"),
    ] = None,
    assume_config: Annotated[
        Path | None, typer.Option(help="config for decisions whose config the log did not record")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    workers: Annotated[int, typer.Option(min=1, help="processes rebuilding cycles (each folds the whole log)")] = 1,
) -> None:
    """Replay the recorded log with the pure core: exit 1 on the first decision that is not identical."""
    console = Console(stderr=as_json)
    try:
        history = open_history(from_history, bootstrap_servers=bootstrap_servers, topic_prefix=topic_prefix)
        fallback = load_config(assume_config) if assume_config is not None else None
    except SOURCE_ERRORS as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(source_message(exc))}")
        raise typer.Exit(2) from None
    if config is not None:
        _whatif(history, config, fallback, as_json)
        return

    show = progress and not as_json and console.is_terminal
    with Progress(
        TextColumn("replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("events"),
        TimeRemainingColumn(),
        console=console,
        disable=not show,
    ) as bar:
        task = bar.add_task("replay", total=history.events)
        report = replay_history(history, fallback, progress=lambda n: bar.advance(task, n), workers=workers)
    if as_json:
        typer.echo(orjson.dumps(report.summary(), option=orjson.OPT_SORT_KEYS).decode())
    else:
        console.print(render_replay(report))
    if not report.ok:
        raise typer.Exit(1)


def _whatif(history: History, path: Path, fallback: SchedulerConfig | None, as_json: bool) -> None:
    try:
        spec = load_whatif(path)
    except ValueError as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    report = run_whatif(history, spec, baseline=fallback)
    if as_json:
        typer.echo(orjson.dumps(report.as_dict(), option=orjson.OPT_SORT_KEYS).decode())
    else:
        Console().print(render_whatif(report))
