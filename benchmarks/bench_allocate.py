"""Allocate throughput: 5,000 nodes x 8 GPUs, 100 queues in a two-level tree, 50,000 pending pods.

The pods are a fixed pseudo-random mix (seeded): whole-GPU pods (1, 2 or 4 GPUs), gangs of 2-8 one-GPU pods,
and fractional pods (0.25 / 0.5 GPU). Prints the scheduler's placements per second and cycle time, and a
same-run baseline: a naive first-fit loop (every pod scans the nodes in order, no queues, no gangs) over the
first ``--baseline-pods`` of the same pods (all 50,000 would take it hours: its scans grow as nodes fill).
Rates are given per wall second and per CPU-second of this process (fair on a shared, loaded machine).
The cycle runs the allocate action alone unless ``--actions`` says otherwise.
Usage: ``python benchmarks/bench_allocate.py [--nodes N] [--pods N] [--actions allocate,reclaim]``.
"""

from __future__ import annotations

import argparse
import random
import time

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindRequested,
    NodeObserved,
    NodeSpec,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodPending,
    PodPipelined,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply

GIB = 2**30


def build(nodes: int, pods: int, seed: int = 7) -> tuple[ClusterState, list[PodSpec]]:
    rng = random.Random(seed)
    state = ClusterState()
    events: list[object] = []
    for i in range(nodes):
        spec = NodeSpec(
            name=f"node-{i:05d}",
            allocatable=Resources(gpu_milli=8000, cpu_milli=128_000, memory=1024 * GIB),
            gpu_memory_mib=81920,
        )
        events.append(NodeObserved(event_id=f"n{i}", ts=0.0, node=spec))
    total_gpu = nodes * 8
    for p in range(10):
        res = QueueResources(gpu=QueueResource(quota=total_gpu * 1000 // 10, over_quota_weight=1))
        events.append(QueueObserved(event_id=f"qp{p}", ts=0.0, queue=QueueSpec(name=f"dept-{p}", resources=res)))
        for c in range(10):
            leaf = QueueResources(
                gpu=QueueResource(quota=total_gpu * 1000 // 200, over_quota_weight=1 + (c % 3)),
                cpu=QueueResource(quota=-1),
                memory=QueueResource(quota=-1),
            )
            team = QueueSpec(name=f"team-{p}-{c}", parent=f"dept-{p}", resources=leaf, created=float(c))
            events.append(QueueObserved(event_id=f"q{p}-{c}", ts=0.0, queue=team))
    made = 0
    job = 0
    all_pods: list[PodSpec] = []
    while made < pods:
        queue = f"team-{rng.randrange(10)}-{rng.randrange(10)}"
        kind = rng.random()
        created = float(job)
        if kind < 0.3:
            size = min(rng.randrange(2, 9), pods - made)
            group = f"gang-{job}"
            events.append(
                PodGroupObserved(
                    event_id=f"g{job}",
                    ts=0.0,
                    pod_group=PodGroupSpec(namespace="ns", name=group, queue=queue, min_member=size, created=created),
                )
            )
            specs: list[tuple[str, int, int | None, str | None]] = [
                (f"{group}-{k}", 1000, None, group) for k in range(size)
            ]
        elif kind < 0.6:
            frac = rng.choice((250, 500))
            specs = [(f"frac-{job}", frac, frac, None)]
        else:
            specs = [(f"pod-{job}", rng.choice((1000, 1000, 2000, 4000)), None, None)]
        for name, gpu, fraction, gang in specs:
            pod = PodSpec(
                namespace="ns",
                name=name,
                uid=f"uid-{name}",
                queue=queue,
                pod_group=gang,
                requests=Resources(gpu_milli=gpu, cpu_milli=4000, memory=16 * GIB),
                gpu_fraction_milli=fraction,
                created=created,
            )
            events.append(PodObserved(event_id=f"p-{name}", ts=1.0, pod=pod))
            all_pods.append(pod)
            made += 1
        job += 1
    for offset, event in enumerate(events):
        apply(state, event, offset)  # type: ignore[arg-type]
    return state, all_pods


def naive_first_fit(nodes: int, pods: list[PodSpec]) -> int:
    """Baseline: each pod scans nodes in order and takes the first with enough free GPU capacity."""
    free = [[1000] * 8 for _ in range(nodes)]
    cpu = [128_000] * nodes
    placed = 0
    for pod in pods:
        need = pod.requests.gpu_milli
        for n in range(nodes):
            gpus = free[n]
            if cpu[n] < pod.requests.cpu_milli:
                continue
            if pod.gpu_fraction_milli:
                g = next((g for g in range(8) if gpus[g] >= need), -1)
                if g < 0:
                    continue
                gpus[g] -= need
            else:
                whole = [g for g in range(8) if gpus[g] == 1000]
                if len(whole) < need // 1000:
                    continue
                for g in whole[: need // 1000]:
                    gpus[g] = 0
            cpu[n] -= pod.requests.cpu_milli
            placed += 1
            break
    return placed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--baseline-pods", type=int, default=5000, help="pods given to the naive loop")
    parser.add_argument("--actions", default="allocate", help="comma-separated actions of the cycle")
    args = parser.parse_args()

    t0 = time.perf_counter()
    state, pods = build(args.nodes, args.pods)
    t1 = time.perf_counter()
    c1 = time.process_time()
    config = SchedulerConfig(actions=tuple(a.strip() for a in args.actions.split(",")))
    decisions = run_cycle(state, config, pool="default", input_offset=state.offset)
    t2 = time.perf_counter()
    c2 = time.process_time()
    bound = sum(1 for d in decisions if isinstance(d, BindRequested))
    pipelined = sum(1 for d in decisions if isinstance(d, PodPipelined))
    pending = sum(1 for d in decisions if isinstance(d, PodPending))
    cycle = t2 - t1
    rate = bound / cycle
    print(f"cluster: {args.nodes} nodes x 8 GPUs, 100 queues (10 x 10), {len(pods)} pending pods")
    print(f"built in {t1 - t0:.1f} s")
    print(f"actions: {', '.join(config.actions)}")
    print(f"cycle time: {cycle:.2f} s  bound: {bound}  pipelined: {pipelined}  pending decisions: {pending}")
    print(f"placements/s: {rate:,.0f} (wall)  {bound / (c2 - c1):,.0f} per CPU-second (cycle CPU {c2 - c1:.2f} s)")

    sample = pods[: args.baseline_pods]
    t3 = time.perf_counter()
    c3 = time.process_time()
    naive_placed = naive_first_fit(args.nodes, sample)
    t4 = time.perf_counter()
    c4 = time.process_time()
    naive_rate = naive_placed / (t4 - t3)
    naive_cpu_rate = naive_placed / (c4 - c3)
    print(f"baseline naive first-fit ({len(sample)} pods): {naive_placed} placed in {t4 - t3:.2f} s")
    print(f"baseline placements/s: {naive_rate:,.0f} (wall)  {naive_cpu_rate:,.0f} per CPU-second")
    cpu_ratio = bound / (c2 - c1) / naive_cpu_rate
    print(f"ratio scheduler / naive first-fit: {rate / naive_rate:.2f}x (wall)  {cpu_ratio:.2f}x (CPU)")


if __name__ == "__main__":
    main()
