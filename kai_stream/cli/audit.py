"""`kai-stream audit verify` (the decision hash chain) and `audit invariants` (every promise of a whole log)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kai_stream.audit import verify_chain
from kai_stream.cli import app
from kai_stream.cli.errors import source_message
from kai_stream.history.reader import SOURCE_ERRORS, History, open_history
from kai_stream.invariants import check_history

audit_app = typer.Typer(no_args_is_help=True, help="Tamper evidence over the decisions log")
app.add_typer(audit_app, name="audit")


_Broker = Annotated[str | None, typer.Option(help="read the log from this broker")]
_TopicPrefix = Annotated[str, typer.Option(help="topic name prefix of the deployment")]
_Json = Annotated[bool, typer.Option("--json", help="print one JSON object")]


def _open(directory: Path | None, bootstrap_servers: str | None, topic_prefix: str) -> History:
    """The log from ``directory`` or the broker; exit 2 naming the problem when it cannot be read."""
    try:
        return open_history(directory, bootstrap_servers=bootstrap_servers, topic_prefix=topic_prefix)
    except SOURCE_ERRORS as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(source_message(exc))}")
        raise typer.Exit(2) from None


@audit_app.command("verify")
def verify(
    from_history: Annotated[
        Path | None, typer.Option("--from-history", help="Parquet history directory (default: .kai-stream/history)")
    ] = None,
    bootstrap_servers: _Broker = None,
    topic_prefix: _TopicPrefix = "",
    as_json: _Json = False,
) -> None:
    """Exit 1 when a decision's prev_hash does not match the hash of the decision before it."""
    history = _open(from_history, bootstrap_servers, topic_prefix)
    decisions = [d for log in history.pools.values() for d in log.decisions]
    offsets = [o for log in history.pools.values() for o in log.decision_offsets]
    report = verify_chain(decisions, offsets=offsets)
    broken = report.broken
    if as_json:
        out: dict[str, object] = {"ok": report.ok, "checked": report.checked, "heads": report.heads}
        if broken is not None:
            out["broken"] = {
                "pool": broken.pool,
                "offset": broken.offset,
                "decision_id": broken.decision.decision_id,
                "suspect_offset": broken.suspect_offset,
                "suspect_decision_id": broken.suspect.decision_id if broken.suspect else None,
                "expected_prev_hash": broken.expected_prev_hash,
                "found_prev_hash": broken.found_prev_hash,
                "message": broken.describe(),
            }
        typer.echo(orjson.dumps(out, option=orjson.OPT_SORT_KEYS).decode())
    else:
        console = Console()
        table = Table("pool", "decisions verified", "head hash", title=f"hash chains in {history.source}")
        for pool in sorted(report.pools):
            table.add_row(pool, str(report.pools[pool]), report.heads[pool])
        console.print(table)
        if broken is None:
            console.print(f"[bold green]chain intact[/]: {report.checked} decisions")
        else:
            console.print(f"[bold red]broken link[/]: {broken.describe()}")
    if broken is not None:
        raise typer.Exit(1)


@audit_app.command("invariants")
def invariants(
    history_dir: Annotated[
        Path | None, typer.Argument(help="Parquet history directory (default: .kai-stream/history, or the broker)")
    ] = None,
    bootstrap_servers: _Broker = None,
    topic_prefix: _TopicPrefix = "",
    as_json: _Json = False,
) -> None:
    """Exit 1 naming the first broken promise: capacity, double bind, partial gang, unaccounted pod, chain."""
    history = _open(history_dir, bootstrap_servers, topic_prefix)
    report = check_history(history)
    found = report.violation
    if as_json:
        out: dict[str, object] = {
            "ok": report.ok,
            "records": report.records,
            "decisions": report.decisions,
            "pools": report.pools,
            "pods": dict(report.pods),
        }
        if found is not None:
            position = found.position
            out["violation"] = {
                "kind": found.kind,
                "pool": position.pool if position else None,
                "topic": position.topic if position else None,
                "offset": position.offset if position else None,
                "ts": position.ts if position else None,
                "node": found.node,
                "pod": found.pod,
                "resource": found.resource,
                "used": found.used,
                "capacity": found.capacity,
                "message": found.describe(),
            }
        typer.echo(orjson.dumps(out, option=orjson.OPT_SORT_KEYS).decode())
    else:
        console = Console()
        if found is not None:
            console.print(f"[bold red]violation[/]: {found.describe()}", soft_wrap=True)
        else:
            table = Table("pool", "records checked", title=f"invariants in {history.source}")
            for pool in sorted(report.pools):
                table.add_row(pool, str(report.pools[pool]))
            console.print(table)
            pods = ", ".join(f"{state} {count}" for state, count in sorted(report.pods.items())) or "none"
            console.print(
                f"[bold green]all invariants hold[/]: {report.records} records ({report.decisions} decisions); "
                f"pods at the end: {pods}",
                soft_wrap=True,
            )
    if found is not None:
        raise typer.Exit(1)
