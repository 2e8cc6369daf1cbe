"""Offline replay throughput over a 1,000,000-event Parquet history.

The history is a live-like log of one pool built from a real trace: Microsoft ITP cluster04 jobs
(/work/shared/traces/itp, submit time, duration, GPUs; queue = team-(crc32(job_id) mod 4)) on the ITP-like
cluster (examples/clusters/itp-like.yaml: 40 nodes x 8 GPUs, four team queues), a tick every second (the
connector's default) and each node's NVML health resync every 300 s (the agent's default). Jobs over 8 GPUs
become gangs of 8-GPU pods. It is recorded by the in-process engine (scheduler + emulated binder, kubelet
and watch: arrival, bind outcome, running, succeeded, deletion, and every decision) once into
``.kai-stream/bench/replay-<N>/`` and reused.

Prints: replay events/s (read Parquet + decode + fold + rebuild every decision + byte compare), wall and per
CPU-second, the time spent in the core's ``run_cycle`` and outside it, and a same-run baseline: reading the
same Parquet and decoding every event and decision into its pydantic object (``read_history(compact=False)``),
without folding or scheduling; the ratio replay/baseline says how much of the raw read+decode speed replay
keeps. Replay itself reads with ``compact=True`` (ticks and repeated NVML readings validated by column and
folded as time-only columns, see ``kai_stream.history.columnar``), so the ratio can exceed 1 when cycles are
cheap. Usage: ``python benchmarks/bench_replay.py [--events N] [--workers W] [--regenerate]``.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import shutil
import time
from pathlib import Path
from typing import cast

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    GpuDevice,
    GpuHealthObserved,
    NodeObserved,
    ObservedEvent,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodSpec,
    Resources,
    Tick,
)
from kai_stream.core.scheduler import compiled
from kai_stream.history.export import write_history
from kai_stream.history.reader import read_history
from kai_stream.replay.engine import run_engine
from kai_stream.replay.runner import replay_history
from kai_stream.trace.clusters import cluster_events
from kai_stream.trace.loaders import load_trace

GIB = 2**30
ROOT = Path(__file__).resolve().parents[1]
TRACE = Path("/work/shared/traces/itp/cluster04.csv")
CLUSTER = ROOT / "examples" / "clusters" / "itp-like.yaml"
RESYNC_S = 300
GPUS_PER_POD = 8


def observed_stream(seconds: int) -> list[ObservedEvent]:
    """Cluster + trace jobs submitted in the first ``seconds`` of the trace + ticks + NVML resyncs."""
    base = cluster_events(CLUSTER)
    nodes = sorted(e.node.name for e in base if isinstance(e, NodeObserved))
    jobs = load_trace(TRACE, "itp").jobs
    first = float(cast(float, jobs["submit"].min()))
    jobs = jobs.filter(jobs["submit"] < first + seconds)
    arrivals: dict[int, list[ObservedEvent]] = {}
    for row in jobs.iter_rows(named=True):
        second = int(row["submit"] - first) + 1
        gpus = int(row["gpus"])
        pods = max(1, -(-gpus // GPUS_PER_POD))
        per_pod = min(gpus, GPUS_PER_POD) * 1000
        out = arrivals.setdefault(second, [])
        group = f"job-{row['job_id'][:13]}"
        if pods > 1:
            spec = PodGroupSpec(namespace=row["queue"], name=group, queue=row["queue"], min_member=pods, created=second)
            out.append(PodGroupObserved(event_id=f"g-{group}", ts=float(second), pod_group=spec))
        for i in range(pods):
            pod = PodSpec(
                namespace=row["queue"],
                name=f"{group}-{i}",
                uid=f"{row['job_id']}-{i}",
                queue=row["queue"],
                pod_group=group if pods > 1 else None,
                requests=Resources(gpu_milli=per_pod, cpu_milli=4000, memory=16 * GIB),
                priority_class="train",
                duration_s=float(row["duration"]),
                created=float(second),
            )
            out.append(PodObserved(event_id=f"p-{pod.uid}", ts=float(second), pod=pod))
    devices = tuple(GpuDevice(index=i, uuid=f"GPU-{i}", memory_mib=32768) for i in range(8))
    events: list[ObservedEvent] = list(base)
    for second in range(1, seconds + 1):
        ts = float(second)
        events.append(Tick(event_id=f"t{second}", ts=ts))
        for n in range(second % RESYNC_S, len(nodes), RESYNC_S):
            events.append(GpuHealthObserved(event_id=f"h{second}-{n}", ts=ts, node=nodes[n], gpus=devices))
        events.extend(arrivals.get(second, ()))
    return events


def generate(directory: Path, target_events: int) -> None:
    seconds = max(60, int(target_events * 0.95))
    while True:
        run = run_engine(observed_stream(seconds), SchedulerConfig(), tick_cycles=False, drain=False)
        produced = len(run.log.events)
        if produced >= target_events:
            break
        seconds = int(seconds * target_events / produced * 1.01) + 1
    run.log.events, run.log.offsets = run.log.events[:target_events], run.log.offsets[:target_events]
    last = run.log.offsets[-1]
    kept = [i for i, d in enumerate(run.log.decisions) if d.input_offset <= last]
    run.log.decisions = [run.log.decisions[i] for i in kept]
    run.log.decision_offsets = [run.log.decision_offsets[i] for i in kept]
    if directory.exists():
        shutil.rmtree(directory)
    write_history(directory, [run.log], segment_records=100_000)


def core_fingerprint() -> str:
    """The scheduler core's sources. A history recorded by other core code is replayed first and regenerated
    only if it diverges (byte-identical optimisations of the core keep it); the stamp then names this core."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "kai_stream" / "core").rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def baseline(directory: Path) -> tuple[float, float, int]:
    """Read the Parquet history and decode every record into its event object, nothing more: wall, CPU."""
    start, cpu_start = time.perf_counter(), time.process_time()
    history = read_history(directory, compact=False)
    events = sum(len(log.events) for log in history.pools.values())
    return time.perf_counter() - start, time.process_time() - cpu_start, events


def _children_cpu() -> float:
    """CPU seconds of the forked replay workers (reaped children), for --workers > 1."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(directory: Path, events: int, workers: int) -> bool:
    """Replay ``directory`` and print the figures; False if it diverged (nothing printed but the divergence)."""
    base_s, base_cpu, base_events = baseline(directory)

    start, cpu_start, children_start = time.perf_counter(), time.process_time(), _children_cpu()
    history = read_history(directory)
    read_s, read_cpu = time.perf_counter() - start, time.process_time() - cpu_start
    report = replay_history(history, workers=workers)
    total_s = time.perf_counter() - start
    cpu_s = time.process_time() - cpu_start + _children_cpu() - children_start
    if not report.ok:
        first = report.first_divergence
        print(f"replay diverged: {first.headline() if first else report.errors}")
        return False
    assert report.events == base_events == events, (report.events, base_events)

    rate = report.events / total_s
    base_rate = base_events / base_s
    cycle_s = sum(p.cycle_s for p in report.pools.values())
    cycles = sum(p.cycles for p in report.pools.values())
    summed = " summed over workers" if workers > 1 else ""
    print(
        f"history: {report.events:,} events, {report.decisions:,} decisions "
        f"({report.identical:,} identical), {cycles:,} cycles rebuilt; scheduler core "
        f"{'compiled (mypyc)' if compiled() else 'from sources (not compiled)'}"
    )
    print(
        f"replay: {total_s:.2f}s wall -> {rate:,.0f} events/s; read+decode {read_s:.2f}s wall ({read_cpu:.2f}s CPU), "
        f"run_cycle {cycle_s:.2f}s{summed} ({cycle_s / max(cycles, 1) * 1000:.2f} ms/cycle)"
    )
    cycle_cpu = sum(p.cycle_cpu_s for p in report.pools.values())
    outside = cpu_s - cycle_cpu
    print(
        f"replay CPU: {cpu_s:.2f}s -> {report.events / cpu_s:,.0f} events per CPU-second; run_cycle "
        f"{cycle_cpu:.2f}s CPU ({cycle_cpu / cpu_s:.0%}); outside run_cycle "
        f"{outside:.2f}s CPU -> {report.events / max(outside, 1e-9):,.0f} events/s (the machine is shared)"
    )
    print(
        f"baseline (Parquet read + decode of every event into its object): {base_s:.2f}s wall ({base_cpu:.2f}s CPU) "
        f"-> {base_rate:,.0f} events/s"
    )
    verdict = "met" if rate >= 100_000 else "NOT met"
    print(f"ratio replay/baseline: {rate / base_rate:.2f}  (target >= 100,000 events/s: {verdict})")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--workers", type=int, default=1, help="processes rebuilding cycles (fork)")
    args = parser.parse_args()
    directory = Path(".kai-stream/bench") / f"replay-{args.events}"
    stamp = directory / "core-fingerprint"
    fingerprint = core_fingerprint()
    current = stamp.is_file() and stamp.read_text() == fingerprint
    if args.regenerate or not stamp.is_file():
        current = _generate(directory, args.events, stamp, fingerprint)
    elif not current:
        print("history recorded by other core code: replaying it; regenerated if it diverges")
    if measure(directory, args.events, args.workers):
        stamp.write_text(fingerprint)
        return
    if current:
        raise SystemExit("replay diverged from a history recorded by this core")
    _generate(directory, args.events, stamp, fingerprint)
    if not measure(directory, args.events, args.workers):
        raise SystemExit("replay diverged from a history recorded by this core")


def _generate(directory: Path, events: int, stamp: Path, fingerprint: str) -> bool:
    started = time.perf_counter()
    generate(directory, events)
    stamp.write_text(fingerprint)
    print(f"generated {directory} in {time.perf_counter() - started:.1f}s")
    return True


if __name__ == "__main__":
    main()
