"""`kai-stream simulate SCENARIO.yaml`: run the pure scheduler in-process over a scenario and show the result."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from kai_stream.cli import app
from kai_stream.core.config import SchedulerConfig, load_config
from kai_stream.core.manifests import ManifestError, load_scenario
from kai_stream.engines import Engine
from kai_stream.simulate import DEFAULT_TERMINATION_GRACE_S
from kai_stream.simulate import simulate as run_simulation


def _fmt_gpus(indices: list[int] | None) -> str:
    """How many GPUs, and which (device indices on the node)."""
    return f"{len(indices)} ({','.join(str(i) for i in indices)})" if indices else "-"


def _render(result: dict[str, Any], console: Console) -> None:
    pods = Table(title="Pods", header_style="bold")
    for column in ("pod", "queue", "status", "node", "GPUs (indices)"):
        pods.add_column(column, overflow="fold")
    colors = {"Running": "green", "Pending": "yellow", "Pipelined": "cyan", "Evicted": "red"}
    for key, pod in result["pods"].items():
        status = pod["status"]
        pods.add_row(
            key, pod["queue"], f"[{colors[status]}]{status}[/]", pod["node"] or "-", _fmt_gpus(pod["gpu_indices"])
        )
    queues = Table(title="Queues (GPU devices, CPU millicores, memory MB)", header_style="bold")
    for column in ("queue", "fair GPU", "alloc GPU", "fair CPU", "alloc CPU", "fair mem", "alloc mem"):
        queues.add_column(column, justify="left" if column == "queue" else "right", overflow="fold")
    for name, q in result["queues"].items():
        fair, alloc = q["fair_share"], q["allocated"]
        queues.add_row(
            name,
            f"{fair['gpu']:g}",
            f"{alloc['gpu']:g}",
            f"{fair['cpu']:.0f}",
            f"{alloc['cpu']:.0f}",
            f"{fair['memory']:.0f}",
            f"{alloc['memory']:.0f}",
        )
    console.print(pods)
    console.print(queues)
    counts: dict[str, int] = {}
    for decision in result["decisions"]:
        counts[decision["type"]] = counts.get(decision["type"], 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
    console.print(f"decisions: {summary}")


@app.command("simulate")
def simulate_command(
    scenario: Annotated[Path, typer.Argument(help="multi-document YAML of Nodes, Queues, PodGroups, Pods")],
    json_out: Annotated[bool, typer.Option("--json", help="print the result as one JSON object")] = False,
    cycles: Annotated[int, typer.Option("--cycles", min=1, help="at most this many scheduling cycles")] = 50,
    config: Annotated[Path | None, typer.Option("--config", help="scheduler config (YAML)")] = None,
    live: Annotated[
        bool, typer.Option("--live", help="run it through the real broker, simulated cluster, connector and binder")
    ] = False,
    lenient: Annotated[bool, typer.Option("--lenient", help="accept unknown fields in the manifests")] = False,
    termination_grace: Annotated[
        float,
        typer.Option("--termination-grace", min=0.0, help="simulated seconds an evicted pod stays terminating"),
    ] = DEFAULT_TERMINATION_GRACE_S,
    engine: Annotated[Engine, typer.Option(help="--live: the embedded broker (tansu or kafka)")] = "tansu",
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="--live: use this running Kafka instead of an embedded broker")
    ] = None,
) -> None:
    """Schedule a scenario in-process until nothing changes; print pods, queues and decision counts (--json: every
    decision)."""
    err = Console(stderr=True, soft_wrap=True)
    try:
        settings = load_config(config) if config is not None else SchedulerConfig()
    except ValueError as exc:
        err.print(f"[red]config error:[/] {exc}")
        raise typer.Exit(2) from None
    try:
        text = scenario.read_text()
    except OSError as exc:
        err.print(f"[red]cannot read scenario {scenario}:[/] {exc.strerror}")
        raise typer.Exit(2) from None
    except UnicodeDecodeError:
        err.print(f"[red]cannot read scenario {scenario}:[/] not a text file (UTF-8 YAML expected)")
        raise typer.Exit(2) from None
    try:
        events = load_scenario(
            text, scheduler_name=settings.scheduler_name, default_queue=settings.default_queue, lenient=lenient
        )
    except ManifestError as exc:
        err.print(f"[red]invalid scenario {scenario}:[/] {exc}")
        raise typer.Exit(2) from None
    if live:
        import asyncio

        from kai_stream.pipeline import simulate_live

        result = asyncio.run(
            simulate_live(
                scenario, settings, config_path=config, termination_grace=termination_grace, engine=engine,
                bootstrap_servers=bootstrap_servers,
            )
        ).to_json()
    else:
        simulated = run_simulation(events, settings, cycles=cycles, termination_grace=termination_grace)
        if not simulated.settled:
            err.print(f"[yellow]warning:[/] decisions still changing after {cycles} cycles (result is the last state)")
        result = simulated.to_json()
    if json_out:
        sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
        return
    _render(result, Console())
