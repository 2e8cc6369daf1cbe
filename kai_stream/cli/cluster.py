"""`kai-stream cluster`: serve a scenario as a simulated Kubernetes cluster over HTTP until Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from connectors.simcluster import ScenarioError, SimCluster
from kai_stream.cli import app
from kai_stream.cli.scenario import validate_scenario_file


async def _serve(
    scenario: Path | None, host: str, port: int, time_scale: float, termination_grace: float, enforce_capacity: bool
) -> None:
    sim = SimCluster(time_scale=time_scale, termination_grace=termination_grace, enforce_capacity=enforce_capacity,
                     freeze_gc=True)
    if scenario is not None:
        sim.load_scenario_file(scenario)
    url = await sim.start(host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    counts = ", ".join(f"{len(sim.objects(kind))} {kind}" for kind in ("nodes", "pods", "queues", "podgroups"))
    console = Console(stderr=True)
    print(url, flush=True)
    console.print(f"simulated cluster at [bold]{url}[/] ({counts}); Ctrl-C to stop")
    try:
        await stop.wait()
    finally:
        await sim.stop()
        console.print(f"stopped; {sim.binding_count} binding POSTs served")


@app.command()
def cluster(
    scenario: Annotated[
        Path | None,
        typer.Option("--scenario", "-s", exists=True, dir_okay=False,
                     help="multi-document YAML of Kubernetes manifests to load"),
    ] = None,
    port: Annotated[int, typer.Option("--port", "-p", help="TCP port (0 picks a free one)")] = 0,
    host: Annotated[str, typer.Option("--host", help="address to listen on")] = "127.0.0.1",
    time_scale: Annotated[float, typer.Option("--time-scale", help="wall seconds per simulated second")] = 1.0,
    termination_grace: Annotated[
        float, typer.Option("--termination-grace", help="simulated seconds an evicted pod stays terminating")
    ] = 0.0,
    enforce_capacity: Annotated[
        bool, typer.Option("--enforce-capacity", help="kubelets reject pods that do not fit (Failed, OutOf<resource>)")
    ] = False,
    lenient: Annotated[bool, typer.Option("--lenient", help="accept unknown fields in the manifests")] = False,
) -> None:
    """Serve the Kubernetes REST API with simulated kubelets; prints the base URL on stdout."""
    if scenario is not None:
        validate_scenario_file(scenario, lenient=lenient)
    try:
        asyncio.run(_serve(scenario, host, port, time_scale, termination_grace, enforce_capacity))
    except ScenarioError as err:
        raise typer.BadParameter(str(err), param_hint="--scenario") from err
