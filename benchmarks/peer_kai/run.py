"""kai-stream and KAI Scheduler on the same workload, one after the other, each on a fresh etcd + kube-apiserver +
KWOK fixture: ``python benchmarks/peer_kai/run.py --nodes 100 --pods 1000``.

Prints, for each scheduler, from the API server's pod records: time to place all, pods/s, created→bound p50/p99
(all pods, the steady phase and the burst), pods left pending, evictions, and the CPU seconds (during the
workload) and peak RSS of the scheduler process alone and of all its components; then the ratios
kai-stream / KAI. The first run builds KAI from the pinned module (``build.py``; many minutes).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.peer_kai import harness, stages, workload
from benchmarks.peer_kai.kai import KaiScheduler, version
from benchmarks.peer_kai.kaistream import KaiStream
from benchmarks.peer_kai.records import Figures

app = typer.Typer(add_completion=False)


class Which(StrEnum):
    both = "both"
    kai_stream = "kai-stream"
    kai = "kai"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or theirs == 0:
        return "-"
    return f"{ours / theirs:.2f}×"


def rows(results: list[harness.RunResult]) -> list[tuple[str, list[float | None], int]]:
    """(label, one value per result, digits) for the comparison table."""
    def fig(phase: str, attr: str) -> list[float | None]:
        values: list[float | None] = []
        for result in results:
            figures: Figures | None = result.figures.get(phase)
            values.append(None if figures is None else getattr(figures, attr))
        return values

    def usage(scheduler_only: bool, attr: str) -> list[float | None]:
        values: list[float | None] = []
        for result in results:
            chosen = [u for name, u in result.usage.items()
                      if not scheduler_only or name == result.scheduler_component]
            values.append(sum(getattr(u, attr) for u in chosen) if chosen else None)
        return values

    return [
        ("pods bound", fig("all", "bound"), 0),
        ("pods left pending", fig("all", "pending"), 0),
        ("pods deleted (evicted)", fig("all", "evicted"), 0),
        ("time to place all (s)", fig("all", "time_to_place_s"), 2),
        ("pods/s, all", fig("all", "pods_per_s"), 1),
        ("pods/s, burst", fig("burst", "pods_per_s"), 1),
        ("created→bound p50 (ms), steady", fig("steady", "p50_ms"), 0),
        ("created→bound p99 (ms), steady", fig("steady", "p99_ms"), 0),
        ("created→bound p50 (ms), burst", fig("burst", "p50_ms"), 0),
        ("created→bound p99 (ms), burst", fig("burst", "p99_ms"), 0),
        ("scheduler CPU-s", usage(True, "cpu_s"), 2),
        ("all components CPU-s", usage(False, "cpu_s"), 2),
        ("scheduler peak RSS (MiB)", usage(True, "peak_rss_mib"), 0),
        ("all components peak RSS (MiB)", usage(False, "peak_rss_mib"), 0),
        ("warm-up pod bound after (s)", [r.warmup_s for r in results], 1),
    ]


def table(results: list[harness.RunResult], title: str) -> Table:
    out = Table(title=title)
    out.add_column("measure")
    for result in results:
        out.add_column(result.scheduler, justify="right")
    if len(results) == 2:
        out.add_column(f"{results[0].scheduler} / {results[1].scheduler}", justify="right")
    for label, values, digits in rows(results):
        cells = [_num(v, digits) for v in values]
        if len(results) == 2:
            cells.append(_ratio(values[0], values[1]))
        out.add_row(label, *cells)
    return out


def components_table(results: list[harness.RunResult]) -> Table:
    out = Table(title="per component: CPU-s during the workload, peak RSS (MiB)")
    for column in ("scheduler", "component", "CPU-s", "peak RSS"):
        out.add_column(column, justify="left" if column in ("scheduler", "component") else "right")
    for result in results:
        for name, use in result.usage.items():
            out.add_row(result.scheduler, name, f"{use.cpu_s:.2f}", f"{use.peak_rss_mib:.0f}")
    return out


def stages_table(results: list[harness.RunResult]) -> Table | None:
    """kai-stream's created→bound time hop by hop, p50 / p99 ms per phase (``stages.py``)."""
    staged = [r for r in results if r.stages]
    if not staged:
        return None
    out = Table(title="created→bound by hop (ms, p50 / p99; pods seen at both ends)")
    for column in ("scheduler", "phase", *stages.HOPS):
        out.add_column(column, justify="left" if column in ("scheduler", "phase") else "right", no_wrap=True)
    for result in staged:
        for phase, hops in result.stages.items():
            cells = [f"{_num(h.p50_ms, 0)} / {_num(h.p99_ms, 0)} ({h.pods})" for h in hops.values()]
            out.add_row(result.scheduler, phase, *cells)
    return out


async def _run(which: Which, spec: workload.WorkloadSpec, rate: float, settle_s: float, timeout_s: float,
               controllers: bool, workdir: Path) -> list[harness.RunResult]:
    load = workload.build(spec)
    schedulers: list[harness.Scheduler] = []
    if which in (Which.both, Which.kai_stream):
        schedulers.append(KaiStream(workdir / "kai-stream"))
    if which in (Which.both, Which.kai):
        schedulers.append(KaiScheduler(workdir / "kai", controllers=controllers))
    results = []
    for scheduler in schedulers:
        Console(stderr=True).print(f"[bold]{scheduler.name}[/]: starting the fixture and the scheduler")
        async with harness.started(scheduler, load.nodes + load.queues, workdir / scheduler.name / "plane",
                                   warmup_queue=workload.leaf_queues(spec)[0]) as session:
            Console(stderr=True).print(f"[bold]{scheduler.name}[/]: ready after {session.warmup_s:.1f} s; "
                                       f"creating {load.pod_count()} pods")
            results.append(await harness.measure(session, load, rate, settle_s, timeout_s))
    return results


@app.command()
def main(
    nodes: Annotated[int, typer.Option(help="KWOK nodes")] = 100,
    pods: Annotated[int, typer.Option(help="pods in all (whole-GPU, fractions, gangs of 4)")] = 1000,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node")] = 8,
    departments: Annotated[int, typer.Option(help="top-level queues")] = 4,
    queues_per_department: Annotated[int, typer.Option(help="leaf queues under each department")] = 5,
    steady_share: Annotated[float, typer.Option(help="share of the pods created at the steady rate")] = 0.5,
    rate: Annotated[float, typer.Option(help="pods/s of the steady phase", min=0.1)] = 25.0,
    settle: Annotated[float, typer.Option(help="stop once no pod was bound for this long (s)")] = 30.0,
    timeout: Annotated[float, typer.Option(help="stop measuring a scheduler after this long (s)")] = 600.0,
    only: Annotated[Which, typer.Option(help="run one scheduler only")] = Which.both,
    controllers: Annotated[bool, typer.Option(help="also run KAI's pod-group and queue controllers")] = False,
    workdir: Annotated[Path | None, typer.Option(help="keep logs here (default: a temporary directory)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the results as JSON")] = None,
) -> None:
    """Run the workload on each scheduler in turn and print both and their ratios."""
    spec = workload.WorkloadSpec(nodes=nodes, pods=pods, gpus_per_node=gpus_per_node, departments=departments,
                                 queues_per_department=queues_per_department, steady_share=steady_share)
    load = workload.build(spec)
    console = Console(width=max(Console().width, 140))
    console.print(f"{nodes} nodes × {gpus_per_node} GPUs, {departments}×{queues_per_department} queues; "
                  f"{load.pod_count()} pods ({load.pod_count('steady')} at {rate:g}/s, then "
                  f"{load.pod_count('burst')} at once) asking {load.gpu_demand():,.1f} of "
                  f"{nodes * gpus_per_node} GPUs; KAI Scheduler {version()}")
    with tempfile.TemporaryDirectory(prefix="peer-kai-") as tmp:
        results = asyncio.run(_run(only, spec, rate, settle, timeout, controllers, workdir or Path(tmp)))
    console.print(table(results, f"kai-stream vs KAI Scheduler: {nodes} nodes, {load.pod_count()} pods"))
    console.print(components_table(results))
    by_hop = stages_table(results)
    if by_hop is not None:
        console.print(by_hop)
    if json_out is not None:
        json_out.write_text(json.dumps([asdict(r) for r in results], indent=2))


if __name__ == "__main__":
    app()
