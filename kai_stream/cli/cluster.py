"""`kai-stream cluster`: serve a scenario as a Kubernetes cluster until Ctrl-C: the simulated cluster over HTTP
(``--engine sim``, prints its URL) or a real control plane, etcd + kube-apiserver + KWOK (``--engine apiserver``,
prints the path of its admin kubeconfig; see kai_stream/connectors/apiserver)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from kai_stream.cli import app
from kai_stream.cli.scenario import validate_scenario_file
from kai_stream.connectors.apiserver import BuildError, ControlPlane, ControlPlaneError
from kai_stream.connectors.simcluster import ScenarioError, SimCluster, read_documents


class Engine(StrEnum):
    sim = "sim"
    apiserver = "apiserver"


def _serve_apiserver(scenario: Path | None, workdir: Path | None) -> None:
    console = Console(stderr=True)
    objs = read_documents(scenario) if scenario is not None else []
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    console.print("starting etcd + kube-apiserver + KWOK (the first run builds them: minutes)")
    with ControlPlane(workdir=workdir) as plane:
        plane.load_objects(objs)
        print(plane.kubeconfig, flush=True)
        console.print(f"kube-apiserver at [bold]{plane.url}[/] ({len(objs)} objects loaded); "
                      f"admin kubeconfig {plane.kubeconfig}; Ctrl-C to stop")
        stop.wait()
    console.print("stopped")


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
    engine: Annotated[
        Engine, typer.Option("--engine", help="sim: the simulated cluster; apiserver: etcd + kube-apiserver + KWOK")
    ] = Engine.sim,
    workdir: Annotated[
        Path | None, typer.Option("--workdir", help="apiserver engine: where certs, kubeconfigs, logs and etcd go "
                                                     "(default: a temporary directory removed on exit)")
    ] = None,
) -> None:
    """Serve the Kubernetes API: simulated (prints the base URL) or a real control plane (prints a kubeconfig)."""
    if scenario is not None:
        validate_scenario_file(scenario, lenient=lenient)
    try:
        if engine is Engine.apiserver:
            _serve_apiserver(scenario, workdir)
        else:
            asyncio.run(_serve(scenario, host, port, time_scale, termination_grace, enforce_capacity))
    except ScenarioError as err:
        raise typer.BadParameter(str(err), param_hint="--scenario") from err
    except (BuildError, ControlPlaneError) as err:
        Console(stderr=True).print(f"[red]control plane failed:[/] {err}")
        raise typer.Exit(1) from err
