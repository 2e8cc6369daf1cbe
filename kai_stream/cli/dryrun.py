"""`kai-stream dry-run POD_MANIFEST`: where the pod would go now, or why not, and whom it would evict."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kai_stream.cli import app
from kai_stream.cli.errors import source_message
from kai_stream.core.config import SchedulerConfig, load_config
from kai_stream.core.manifests import ManifestError, load_scenario
from kai_stream.core.state import ClusterState
from kai_stream.dryrun import DryRun, DryRunError, dry_run, log_state, pod_events, recorded_config, scenario_state
from kai_stream.history.reader import SOURCE_ERRORS, open_history

ERRORS: tuple[type[Exception], ...] = (ManifestError, *SOURCE_ERRORS)
"""What the command reports and exits 2 on (``DryRunError`` is a ``ValueError``)."""


def _render(result: DryRun, console: Console) -> None:
    where = f"{result.node} (GPUs {','.join(map(str, result.gpu_indices)) or '-'})"
    if result.outcome == "bind":
        console.print(f"[green]fits now[/]: {result.pod} ({result.queue}) -> {where}, by {result.action}")
    elif result.outcome == "pipeline":
        console.print(
            f"[cyan]fits after evictions[/]: {result.pod} ({result.queue}) -> {where} once its victims are gone, "
            f"by {result.action}"
        )
    elif result.outcome == "pending":
        console.print(f"[yellow]does not fit[/]: {result.pod} ({result.queue}) stays pending: {result.code}")
        console.print(f"  {result.reason}")
    else:
        console.print(f"[yellow]no decision[/] for {result.pod} ({result.queue}) in one cycle")
    if result.victims:
        table = Table(title="Would evict", header_style="bold")
        for column in ("pod", "queue", "node", "action"):
            table.add_column(column)
        for victim in result.victims:
            table.add_row(victim.pod, victim.queue, victim.node or "-", victim.action)
        console.print(table)


def _state(
    scenario: Path | None,
    from_history: Path | None,
    pool: str,
    config: SchedulerConfig | None,
    bootstrap_servers: str | None,
    topic_prefix: str,
) -> tuple[ClusterState, SchedulerConfig]:
    if scenario is not None:
        settings = config or SchedulerConfig()
        events = load_scenario(
            scenario.read_text(), scheduler_name=settings.scheduler_name, default_queue=settings.default_queue
        )
        return scenario_state(events, settings), settings
    history = open_history(from_history, bootstrap_servers=bootstrap_servers, topic_prefix=topic_prefix)
    log = history.pools.get(pool)
    if log is None:
        raise DryRunError(f"no pool {pool!r} in {history.source} (pools: {', '.join(sorted(history.pools))})")
    settings = recorded_config(log) or config or SchedulerConfig()
    return log_state(log, settings), settings


@app.command("dry-run")
def dry_run_command(
    pod_manifest: Annotated[Path, typer.Argument(help="YAML with one Pod (and optionally its PodGroup)")],
    scenario: Annotated[
        Path | None, typer.Option("--scenario", help="the cluster now: a scenario, scheduled until it settles")
    ] = None,
    from_history: Annotated[
        Path | None, typer.Option("--from-history", help="the cluster now: the end of a Parquet history")
    ] = None,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="the cluster now: the live log on this broker")
    ] = None,
    topic_prefix: Annotated[str, typer.Option(help="topic name prefix of the deployment")] = "",
    config: Annotated[
        Path | None, typer.Option("--config", help="scheduler config (a log's recorded one wins)")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the result as one JSON object")] = False,
) -> None:
    """Where the pod would go now (node, GPUs) or why not, and which pods it would evict: one cycle of the core
    on the state with the pod added; nothing is published. The cluster: a scenario, a history, or else the live
    log (the broker named or from the environment; the default history directory when it exists)."""
    err = Console(stderr=True)
    if scenario is not None and (from_history is not None or bootstrap_servers is not None):
        err.print("[red]error:[/] give one of --scenario FILE, --from-history DIR or --bootstrap-servers")
        raise typer.Exit(2)
    try:
        given = load_config(config) if config is not None else None
        text = pod_manifest.read_text()
        probe = pod_events(text, given or SchedulerConfig(), 0.0)
        pool = next(e.pool for e in probe if e.type == "PodObserved")
        state, settings = _state(scenario, from_history, pool, given, bootstrap_servers, topic_prefix)
        result = dry_run(state, settings, pod_events(text, settings, state.now))
    except ERRORS as exc:
        err.print(f"[red]error:[/] {escape(source_message(exc))}")
        raise typer.Exit(2) from None
    if json_out:
        sys.stdout.buffer.write(orjson.dumps(result.to_json(), option=orjson.OPT_SORT_KEYS) + b"\n")
        sys.stdout.flush()
        return
    _render(result, Console())
