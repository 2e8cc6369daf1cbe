"""`kai-stream analyze HISTORY_DIR`: the history summary as tables, JSON, or a report with plots."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console

from kai_stream.cli import app
from kai_stream.history.reader import DEFAULT_HISTORY_DIR, NO_HISTORY


@app.command("analyze")
def analyze_command(
    history: Annotated[
        Path, typer.Argument(help="history directory (Parquet segments of a live or trace run)")
    ] = DEFAULT_HISTORY_DIR,
    json_out: Annotated[bool, typer.Option("--json", help="print the summary as one JSON object")] = False,
    report: Annotated[
        Path | None, typer.Option("--report", help="write PNG plots and report.html (images embedded) here")
    ] = None,
) -> None:
    """Per queue and over time: allocation vs fair share, queueing delay, JCT, evictions, fragmentation."""
    from kai_stream.analytics.render import print_summary
    from kai_stream.analytics.report import write_report
    from kai_stream.analytics.summary import summarize

    console = Console(stderr=json_out)
    if history == DEFAULT_HISTORY_DIR and not history.is_dir():
        raise LookupError(NO_HISTORY)
    try:
        summary = summarize(history)
    except FileNotFoundError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    if report is not None:
        page = write_report(summary, report, title=f"kai-stream report: {history}")
        console.print(f"report: {page}")
    if json_out:
        typer.echo(orjson.dumps(summary.to_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        print_summary(summary, console)
