"""`kai-stream explain POD`: the pod's story from the log (human-readable, or `--json`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kai_stream.analytics.render import moment
from kai_stream.cli import app
from kai_stream.cli.errors import source_message
from kai_stream.core.config import load_config
from kai_stream.explain import QueueStanding, Story, explain_pod, stories_json
from kai_stream.history.reader import SOURCE_ERRORS, open_history


def _standing_table(standing: dict[str, QueueStanding], own: str) -> Table:
    timed = any(s.usage_gpu is not None for s in standing.values())
    usage_column = ("GPU usage (window)",) if timed else ()
    headers = ("queue", "deserved GPU", "fair share GPU", "allocated GPU", "requested GPU", *usage_column, "")
    table = Table(*headers, box=None)
    for name, s in standing.items():
        mark = "over fair share" if s.over_fair_share else ""
        style = "bold" if name == own else ("red" if s.over_fair_share else "")
        deserved = "unlimited" if s.deserved_gpu < 0 else f"{s.deserved_gpu:g}"
        table.add_row(
            name + (" (this pod)" if name == own else ""),
            deserved,
            f"{s.fair_share_gpu:g}",
            f"{s.allocated_gpu:g}",
            f"{s.requested_gpu:g}",
            *((f"{100 * (s.usage_gpu or 0.0):.1f} %",) if timed else ()),
            mark,
            style=style,
        )
    return table


def _print(console: Console, story: Story) -> None:
    gpu = story.gpu_milli / 1000
    console.print(
        f"[bold]{story.pod}[/]  queue={story.queue} pool={story.pool} gpu={gpu:g} uid={story.uid}", overflow="fold"
    )
    table = Table("time (UTC)", "what", "story", show_lines=False)
    table.columns[0].no_wrap = True
    for step in story.steps:
        table.add_row(moment(step.ts), step.kind, step.summary)
    console.print(table)
    for step in story.steps:
        if step.standing is not None:
            offset = step.data.get("input_offset")
            console.print(f"queues at {moment(step.ts)} ({step.kind}, cycle at offset {offset}):", overflow="fold")
            console.print(_standing_table(step.standing, story.queue))
    blocking = story.blocking_queues()
    over = f"; queues over their fair share: {', '.join(blocking)}" if blocking else ""
    console.print(f"status: [bold]{story.status}[/]{over}")


@app.command("explain")
def explain(
    pod: Annotated[str, typer.Argument(help="namespace/name, a bare name, or a uid")],
    from_history: Annotated[
        Path | None, typer.Option("--from-history", help="Parquet history directory (default: .kai-stream/history)")
    ] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(help="read the log from this broker instead")] = None,
    topic_prefix: Annotated[str, typer.Option(help="topic name prefix of the deployment")] = "",
    assume_config: Annotated[Path | None, typer.Option(help="config when the log recorded none")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON for tools")] = False,
) -> None:
    """When the pod arrived, why it waited, which queues held the GPUs, where it ran, who evicted it and why."""
    try:
        history = open_history(from_history, bootstrap_servers=bootstrap_servers, topic_prefix=topic_prefix)
        config = load_config(assume_config) if assume_config is not None else None
        stories = explain_pod(history, pod, config=config)
    except SOURCE_ERRORS as exc:  # PodNotFound is a LookupError
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(source_message(exc))}")
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(stories_json(stories).decode())
        return
    console = Console()
    for story in stories:
        _print(console, story)
