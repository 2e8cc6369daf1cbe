"""`kai-stream run` (what `make run` calls): the whole pipeline on this machine, decisions shown live.

Embedded broker (memory, or ``--durable``) + simulated cluster loaded with a scenario (the bundled
``examples/demo.yaml`` by default) + Kubernetes connector + faust scheduler processor + binder. Finished
pods are re-submitted under a new name so decisions keep flowing; Ctrl-C (or ``--duration``) stops
everything cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import shlex
import shutil
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from kubernetes_asyncio import client
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

import kai_stream
from kai_stream.broker import UNSAFE_DURABLE
from kai_stream.cli import app
from kai_stream.cli.broker_options import EngineOption, SecureOption
from kai_stream.cli.scenario import load_scenario_file
from kai_stream.connectors.simcluster.client import kube_client_config
from kai_stream.core.config import SchedulerConfig, load_config
from kai_stream.core.events import ConfigRecorded, DecisionsRecord, FairShareRecorded, PodPending
from kai_stream.history.reader import ALL_TOPICS, DEFAULT_HISTORY_DIR
from kai_stream.history.sink import SinkStats, run_sink
from kai_stream.pipeline import Pipeline, PipelineOptions
from kai_stream.settings import KafkaSettings
from kai_stream.simulate import DEFAULT_TERMINATION_GRACE_S

DEMO = Path(kai_stream.__file__).resolve().parent.parent / "examples" / "demo.yaml"
_RESUBMITTED = re.compile(r"-r\d+$")
_COLORS = {"BindRequested": "green", "PodPending": "yellow", "PodPipelined": "cyan", "EvictionRequested": "red"}


def _describe(record: DecisionsRecord) -> tuple[str, str, str, str, str]:
    if isinstance(record, ConfigRecorded):
        return (record.pool, "ConfigRecorded", "-", "-", f"config {record.config_hash[:12]}")
    if isinstance(record, FairShareRecorded):
        shares = ", ".join(f"{q.queue} {q.fair_share.gpu_milli / 1000:g}" for q in record.queues)
        return (record.pool, "FairShareRecorded", "-", "-", f"fair share GPUs: {shares}")
    pod = f"{record.namespace}/{record.name}"
    node = str(getattr(record, "node", None) or "-")
    detail = record.code if isinstance(record, PodPending) else str(getattr(record, "reason", "") or "")
    return (record.pool, record.type, pod, node, detail)


class Board:
    """The last decisions and running totals, as a rich renderable or as plain log lines."""

    def __init__(self, console: Console, rows: int = 18) -> None:
        self.console = console
        self.recent: deque[tuple[str, str, str, str, str]] = deque(maxlen=rows)
        self.counts: Counter[str] = Counter()
        self.started = time.monotonic()
        self.live = console.is_terminal
        self.example_pod: str | None = None

    def add(self, record: DecisionsRecord) -> None:
        row = _describe(record)
        if self.example_pod is None and row[1] == "BindRequested":
            self.example_pod = row[2]
        self.counts[row[1]] += 1
        self.recent.append(row)
        if not self.live:
            self.console.print(
                f"decision {row[1]:<17} pool={row[0]} pod={row[2]} node={row[3]} {row[4]}", soft_wrap=True
            )

    def summary(self, bindings: int, running: int) -> str:
        totals = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "waiting for decisions"
        elapsed = time.monotonic() - self.started
        return f"{elapsed:5.0f}s  {totals}  | binding POSTs {bindings}  | pods running {running}"

    def render(self, bindings: int, running: int) -> Group:
        table = Table(title="kai-stream: decisions (latest last)", header_style="bold", expand=True)
        for column in ("pool", "decision", "pod", "node", "detail"):
            table.add_column(column, overflow="fold")
        for pool, kind, pod, node, detail in self.recent:
            color = _COLORS.get(kind, "white")
            table.add_row(pool, f"[{color}]{kind}[/]", pod, node, detail)
        return Group(table, self.summary(bindings, running) + "  | Ctrl-C stops")


async def _resubmit(pipeline: Pipeline, api: client.ApiClient, every_s: float) -> None:
    """Delete finished pods and submit a fresh copy of each (same spec, new name)."""
    core = client.CoreV1Api(api)
    generation = 0
    while True:
        await asyncio.sleep(every_s)
        for pod in pipeline.cluster.objects("Pod"):
            if (pod.get("status") or {}).get("phase") != "Succeeded":
                continue
            meta = pod["metadata"]
            generation += 1
            base = _RESUBMITTED.sub("", str(meta["name"]))
            fresh: Any = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{base}-r{generation}",
                    "namespace": meta.get("namespace", "default"),
                    "labels": meta.get("labels") or {},
                    "annotations": {
                        k: v for k, v in (meta.get("annotations") or {}).items() if k != "kai.scheduler/gpu-indices"
                    },
                },
                "spec": {k: v for k, v in pod["spec"].items() if k not in ("nodeName",)},
            }
            await core.delete_namespaced_pod(meta["name"], meta.get("namespace", "default"))
            await core.create_namespaced_pod(meta.get("namespace", "default"), fresh)


def _next_steps(history: Path, board: Board) -> str:
    """The commands that look at what this run recorded."""
    program = sys.argv[0] if Path(sys.argv[0]).name == "kai-stream" else "python -m kai_stream"
    source = "" if history == DEFAULT_HISTORY_DIR else f" --from-history {shlex.quote(str(history))}"
    analyze_dir = "" if history == DEFAULT_HISTORY_DIR else f" {shlex.quote(str(history))}"
    pod = shlex.quote(board.example_pod or "NAMESPACE/POD")
    return "\n".join(
        [
            f"recorded in {history}; look at what just ran:",
            f"  {program} replay{source}              # rebuild every decision from the log, byte for byte",
            f"  {program} audit verify{source}        # check the decisions' hash chain",
            f"  {program} explain {pod}{source}  # one pod's story",
            f"  {program} analyze{analyze_dir}             # fair share, queueing delay, JCT per queue",
            f"  {program} tail decisions{source}      # the decisions, one per line",
        ]
    )


async def _record(pipeline: Pipeline, history: Path, stop: asyncio.Event) -> SinkStats:
    """The embedded history sink: every topic of this run archived under ``history`` until ``stop``."""
    assert pipeline.kafka is not None
    fields = KafkaSettings.model_fields
    defaults = {name: fields[name].default for name in ("session_timeout_ms", "heartbeat_interval_ms")}
    settings = pipeline.kafka.model_copy(update=defaults)
    return await run_sink(settings, history, ALL_TOPICS, stop, names=pipeline.names, segment_seconds=1.0)


def _fresh_history(history: Path, console: Console) -> None:
    """Keep the previous run's history as ``<dir>.previous`` (one generation) so this run starts empty."""
    if history.exists() and any(history.iterdir()):
        previous = history.with_name(history.name + ".previous")
        shutil.rmtree(previous, ignore_errors=True)
        history.rename(previous)
        console.print(f"previous history moved to {previous}")


@contextlib.contextmanager
def _progress(console: Console) -> Iterator[Callable[[str], None]]:
    """Say what the start-up is doing, with the seconds since it began: a spinner on a terminal, else lines."""
    began = time.monotonic()
    spinner = console.status("starting …") if console.is_terminal else None

    def show(what: str) -> None:
        line = f"{what} … ({time.monotonic() - began:.0f} s)"
        if spinner is not None:
            spinner.update(line)
        else:
            console.print(line, soft_wrap=True)

    if spinner is None:
        yield show
        return
    with spinner:
        yield show


@contextlib.asynccontextmanager
async def _started(options: PipelineOptions, console: Console) -> AsyncIterator[Pipeline]:
    """The pipeline, started with its progress shown, stopped on the way out."""
    with _progress(console) as show:
        pipeline = Pipeline(dataclasses.replace(options, progress=show))
        await pipeline.__aenter__()
    try:
        yield pipeline
    finally:
        await pipeline.__aexit__(None, None, None)


async def _run(
    options: PipelineOptions,
    duration: float | None,
    resubmit_s: float | None,
    console: Console,
    history: Path | None = None,
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    board = Board(console)
    console.print(f"starting broker, simulated cluster ({options.scenario}), connector, processor, binder …")
    async with _started(options, console) as pipeline:
        assert pipeline.tail is not None and pipeline.kafka is not None
        pipeline.tail.listeners.append(board.add)
        console.print(
            f"broker {pipeline.kafka.bootstrap_servers} ({options.engine}, {pipeline.kafka.security_protocol})"
            f"  cluster {pipeline.cluster.url}"
        )
        assert pipeline.cluster.url is not None
        api = client.ApiClient(configuration=kube_client_config(pipeline.cluster.url))
        helpers: list[asyncio.Task[None]] = []
        if resubmit_s:
            helpers.append(asyncio.create_task(_resubmit(pipeline, api, resubmit_s)))
        stop_recording = asyncio.Event()
        recorder = asyncio.create_task(_record(pipeline, history, stop_recording)) if history is not None else None
        deadline = time.monotonic() + duration if duration is not None else None
        failure: str | None = None

        def running() -> int:
            return sum(1 for p in pipeline.cluster.objects("Pod") if (p.get("status") or {}).get("phase") == "Running")

        def status() -> Group:
            return board.render(pipeline.cluster.binding_count, running())

        live = Live(status(), console=console, refresh_per_second=4) if board.live else contextlib.nullcontext()
        with live:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.25)
                if isinstance(live, Live):
                    live.update(status())
                failure = pipeline.failed()
                if failure is not None or (deadline is not None and time.monotonic() >= deadline):
                    break
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        await api.close()
        console.print(board.summary(pipeline.cluster.binding_count, running()), soft_wrap=True)
        if recorder is not None:
            await asyncio.sleep(1.0)  # the last decisions reach the sink
            stop_recording.set()
            stats = await recorder
            console.print(f"history: {stats.rows} records in {stats.segments} segments")
        console.print("stopping …")
    if failure is not None:
        console.print(f"[red]a component failed:[/] {failure}")
        return 1
    console.print("stopped cleanly")
    if history is not None:
        console.print(_next_steps(history, board), soft_wrap=True, highlight=False, markup=False)
    return 0


@app.command("run")
def run(
    scenario: Annotated[Path, typer.Option(help="scenario YAML loaded into the simulated cluster")] = DEMO,
    durable: Annotated[
        bool, typer.Option("--durable", help="refused: the embedded durable storage loses acknowledged records")
    ] = False,
    data_dir: Annotated[Path, typer.Option(help="where --durable keeps the log")] = Path(".kai-stream"),
    duration: Annotated[float | None, typer.Option(help="stop after this many seconds")] = None,
    tick_interval: Annotated[float, typer.Option(help="seconds between Tick events")] = 1.0,
    resubmit: Annotated[float, typer.Option(help="re-submit finished pods every N seconds (0: never)")] = 1.0,
    config: Annotated[Path | None, typer.Option(help="scheduler config (YAML)")] = None,
    termination_grace: Annotated[
        float, typer.Option(min=0.0, help="seconds an evicted pod stays terminating (Kubernetes' default: 30)")
    ] = DEFAULT_TERMINATION_GRACE_S,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="use this Kafka instead of starting the embedded broker")
    ] = None,
    history: Annotated[
        Path, typer.Option(help="record every topic here (Parquet) for replay, audit, explain, analyze")
    ] = DEFAULT_HISTORY_DIR,
    no_history: Annotated[bool, typer.Option("--no-history", help="record nothing")] = False,
    engine: EngineOption = "tansu",
    secure: SecureOption = False,
) -> None:
    """Run broker + simulated cluster + connector + processor + binder and show decisions live."""
    if durable and bootstrap_servers is None:
        Console(stderr=True).print(f"[red]--durable refused:[/] {UNSAFE_DURABLE}")
        raise typer.Exit(2)
    if secure and (engine != "kafka" or bootstrap_servers is not None):
        why = (
            "a Kafka of one's own takes its security from KAI_STREAM_KAFKA_* settings"
            if bootstrap_servers
            else ("only the Apache Kafka engine has a SASL_SSL listener: add --engine kafka")
        )
        Console(stderr=True).print(f"[red]--secure refused:[/] {why}", soft_wrap=True)
        raise typer.Exit(2)
    settings = load_config(config) if config is not None else SchedulerConfig()
    load_scenario_file(scenario, settings)
    options = PipelineOptions(
        scenario=scenario,
        durable=durable,
        data_dir=data_dir,
        bootstrap_servers=bootstrap_servers,
        config_path=config,
        tick_interval_s=tick_interval,
        termination_grace=termination_grace,
        engine=engine,
        secure=secure,
    )
    console = Console()
    if not no_history:
        _fresh_history(history, console)
    code = asyncio.run(_run(options, duration, resubmit or None, console, None if no_history else history))
    raise typer.Exit(code)
