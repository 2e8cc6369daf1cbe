"""`kai-stream trace run|compare|openb-nodes`: replay real job traces in virtual time through the core."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kai_stream.analytics.fit import fitted_tables
from kai_stream.cli import app

trace_app = typer.Typer(no_args_is_help=True, help="trace-driven simulation (ITP, Alibaba openb, generic CSV)")
app.add_typer(trace_app, name="trace")

FormatOpt = Annotated[str, typer.Option("--format", help="itp | alibaba-openb | generic")]
ColumnsOpt = Annotated[
    str | None,
    typer.Option("--columns", help="generic CSV mapping, e.g. submit=t,duration=d,gpus=n,queue=team,gpu_milli=m"),
]
ClusterOpt = Annotated[Path, typer.Option("--cluster", help="cluster YAML (Nodes, optional Queues)")]
WindowOpt = Annotated[
    str | None, typer.Option("--window", help="START:END after the first submission (s, or with m/h/d: 0:600h)")
]
QueuesOpt = Annotated[
    str, typer.Option("--queues", help="auto: one queue per team with equal quota when the cluster has none; file")
]
TeamsOpt = Annotated[int, typer.Option("--teams", help="teams to hash jobs into when the trace has none")]


def _fail(console: Console, message: str) -> typer.Exit:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {message}")
    return typer.Exit(2)


def _load(
    console: Console, trace: Path, fmt: str, columns: str | None, window: str | None, teams: int, cluster: Path
) -> tuple[Any, list[Any]]:
    from kai_stream.trace.clusters import cluster_events
    from kai_stream.trace.loaders import TraceError, load_trace, parse_columns, parse_window

    if fmt not in ("itp", "alibaba-openb", "generic"):
        raise _fail(console, f"--format: expected itp | alibaba-openb | generic, got {fmt!r}")
    try:
        jobs = load_trace(
            trace,
            fmt,  # type: ignore[arg-type]
            columns=parse_columns(columns),
            window=parse_window(window),
            teams=teams,
        )
        base = cluster_events(cluster)
    except TraceError as exc:
        raise _fail(console, str(exc)) from None
    if jobs.jobs.height == 0:
        raise _fail(console, f"{trace}: no jobs (check --window)")
    return jobs, base


@trace_app.command("run")
def run_command(
    trace: Annotated[Path, typer.Argument(help="trace CSV")],
    cluster: ClusterOpt,
    history: Annotated[Path, typer.Option("--history", help="write the history (Parquet) here")],
    fmt: FormatOpt = "generic",
    columns: ColumnsOpt = None,
    config: Annotated[Path | None, typer.Option("--config", help="scheduler config YAML")] = None,
    window: WindowOpt = None,
    queues: QueuesOpt = "auto",
    teams: TeamsOpt = 4,
    report: Annotated[Path | None, typer.Option("--report", help="also write the analyze report here")] = None,
    cycle_every: Annotated[
        float, typer.Option("--cycle-every", help="run cycles only every N simulated seconds (0: on every event)")
    ] = 0.0,
    json_out: Annotated[bool, typer.Option("--json", help="print simulation stats and summary as JSON")] = False,
) -> None:
    """Simulate the trace on the cluster through the pure core and write a history that analyze reads."""
    from kai_stream.analytics.render import print_summary
    from kai_stream.analytics.report import write_report
    from kai_stream.analytics.summary import summarize
    from kai_stream.core.config import SchedulerConfig, load_config
    from kai_stream.trace.clusters import auto_queue_events
    from kai_stream.trace.simulator import simulate_trace

    console = Console(stderr=json_out)
    jobs, base = _load(console, trace, fmt, columns, window, teams, cluster)
    try:
        scheduler_config = load_config(config) if config is not None else SchedulerConfig()
    except ValueError as exc:
        raise _fail(console, str(exc)) from None
    if queues not in ("auto", "file"):
        raise _fail(console, f"--queues: expected auto | file, got {queues!r}")
    if queues == "auto":
        added = auto_queue_events(base, jobs.teams)
        if added:
            jobs.notes.append(f"--queues auto: {len(added)} queues with equal GPU quota ({', '.join(jobs.teams)})")
        base += added
    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs submitted"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task("simulate", total=jobs.jobs.height)
        stats = simulate_trace(
            jobs,
            base,
            scheduler_config,
            history,
            cycle_every=cycle_every,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    summary = summarize(history)
    summary.notes = [*stats.notes, *summary.notes]
    if report is not None:
        page = write_report(summary, report, title=f"kai-stream trace report: {trace.name}")
        console.print(f"report: {page}")
    if json_out:
        payload = {"simulation": stats.to_json(), "summary": summary.to_json()}
        typer.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode())
        return
    console.print(
        f"simulated {stats.jobs:,} jobs ({stats.pods:,} pods) over {stats.simulated_s / 3600:,.1f} h "
        f"in {stats.wall_s:.1f} s wall ({stats.jobs / max(stats.wall_s, 1e-9):,.0f} jobs/s); "
        f"{stats.cycles:,} cycles ({stats.cycle_wall_s:.1f} s), {stats.skipped_cycles:,} skipped, "
        f"{stats.events:,} history rows -> {history}"
    )
    print_summary(summary, console)


@trace_app.command("compare")
def compare_command(
    trace: Annotated[Path, typer.Argument(help="trace CSV")],
    cluster: ClusterOpt,
    configs: Annotated[
        str, typer.Option("--configs", help="comma list: kai, no-reclaim, fifo, binpack, spread, or config files")
    ] = "kai,no-reclaim,fifo",
    fmt: FormatOpt = "generic",
    columns: ColumnsOpt = None,
    window: WindowOpt = None,
    queues: QueuesOpt = "auto",
    teams: TeamsOpt = 4,
    history: Annotated[
        Path | None, typer.Option("--history", help="keep each policy's history under DIR/<policy>")
    ] = None,
    report: Annotated[Path | None, typer.Option("--report", help="write compare.png and compare.html here")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the rows as JSON")] = False,
) -> None:
    """Run one trace under several policies; side-by-side JCT, queueing delay, utilization, fairness, evictions."""
    from kai_stream.analytics.render import compare_cells
    from kai_stream.analytics.report import write_compare_report
    from kai_stream.trace.compare import compare
    from kai_stream.trace.loaders import TraceError

    console = Console(stderr=json_out)
    jobs, base = _load(console, trace, fmt, columns, window, teams, cluster)
    policies = [p.strip() for p in configs.split(",") if p.strip()]
    try:
        with console.status(f"simulating {jobs.jobs.height:,} jobs under {len(policies)} policies"):
            rows = compare(jobs, base, policies, auto_queues=queues == "auto", history_root=history)
    except (TraceError, ValueError) as exc:
        raise _fail(console, str(exc)) from None
    if report is not None:
        console.print(f"report: {write_compare_report(rows, report)}")
    if json_out:
        typer.echo(
            orjson.dumps(
                {"trace": str(trace), "notes": jobs.notes, "policies": rows}, option=orjson.OPT_INDENT_2
            ).decode()
        )
        return
    headers, cells = compare_cells(rows)
    for table in fitted_tables(f"{trace.name}: {jobs.jobs.height:,} jobs", headers, cells, console.width):
        console.print(table)
    for note in jobs.notes:
        console.print(f"[dim]note: {note}[/dim]")


@trace_app.command("openb-nodes")
def openb_nodes_command(
    node_list: Annotated[Path, typer.Argument(help="openb_node_list_gpu_node.csv")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write here instead of stdout")] = None,
) -> None:
    """Convert the Alibaba openb node list into a cluster file (Node manifests)."""
    from kai_stream.trace.clusters import openb_nodes_yaml
    from kai_stream.trace.loaders import TraceError

    try:
        text = openb_nodes_yaml(node_list)
    except (TraceError, OSError) as exc:
        raise _fail(Console(stderr=True), str(exc)) from None
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)
