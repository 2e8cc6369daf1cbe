"""Full scheduling cycle (allocate, consolidation, reclaim, preempt, stale-gang eviction) at scale.

5,000 nodes x 8 GPUs, 100 leaf queues (10 departments x 10 teams), 50,000 pods: a seeded mix of 45,000 running
pods (whole-GPU and half-GPU, mostly preemptible 'train', some 'build') filling ~95% of the GPUs, with one
over-quota team (team-0-0) holding ~20% of them far above its deserved share (packed on the first fifth of the
nodes, as bin-packing placed it when it borrowed idle capacity; ``--scatter`` interleaves it with the others,
the worst case for reclaim), and 5,000 pending pods (single
pods of 0.5-4 GPUs, gangs of 2-4, some 'build'/'inference') in the other queues, so that reclaim and preempt
have work. Prints seconds per full cycle (median CPU time of this process, and wall time) and, as the same-run
baseline, the allocate-only cycle on the same state (ratio = full / allocate-only); then the same for the next
cycle, once the first cycle's decisions and the emulated cluster's answers are folded. Both are cold cycles
(``run_cycle(reuse=False)``: the snapshot built from the whole state, as the first cycle after a restart).

Third figure, the steady state that the streaming processor, replay and the trace simulator live in: 1,000 nodes
x 8 GPUs, 10,000 running pods (whole and half GPUs, ~88% of the GPUs), and per cycle a few running pods finish
(Succeeded or removed) and a few new pods arrive pending; each cycle's decisions and the cluster's answers are
folded back before the next. Prints the median CPU ms of such a cycle (``run_cycle`` reusing the pool's snapshot
kept in ``ClusterState.derived``) and, as the same-run baseline, a cold cycle on the same states (ratio = cold /
steady).
Usage: ``python benchmarks/bench_cycle.py [--nodes N] [--pods N] [--repeat N] [--scatter] [--steady-cycles N]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter
from typing import Any

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    AnyEvent,
    Decision,
    NodeObserved,
    NodeSpec,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodRemoved,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply
from kai_stream.emulation import outcome_of

GIB = 2**30
GPUS_PER_NODE = 8


def _pod(name: str, uid: int, queue: str, milli: int, **fields: Any) -> PodSpec:
    """A bench pod: one CPU, 4 GiB and ``milli`` GPU (a fraction below one device)."""
    return PodSpec(
        namespace="bench",
        name=name,
        uid=f"u{uid}",
        queue=queue,
        requests=Resources(gpu_milli=milli, cpu_milli=1000, memory=4 * GIB),
        gpu_fraction_milli=milli if milli < 1000 else None,
        **fields,
    )


def _running(uid: int, queue: str, milli: int, priority_class: str, node: str, device: int) -> PodSpec:
    """A bench pod running since ``uid`` on one device of ``node``."""
    return _pod(f"run-{uid}", uid, queue, milli, priority_class=priority_class, node_name=node,
                gpu_indices=(device,), phase="Running", created=float(uid), started=float(uid))


def build(nodes: int, pods: int, seed: int = 11, scatter: bool = False) -> ClusterState:
    rng = random.Random(seed)
    events: list[AnyEvent] = []
    for i in range(nodes):
        node_spec = NodeSpec(
            name=f"node-{i:05d}",
            allocatable=Resources(gpu_milli=GPUS_PER_NODE * 1000, cpu_milli=128_000, memory=1024 * GIB),
            gpu_memory_mib=81920,
        )
        events.append(NodeObserved(event_id=f"n{i}", ts=0.0, node=node_spec))
    total = nodes * GPUS_PER_NODE * 1000
    leaves: list[str] = []
    for d in range(10):
        res = QueueResources(gpu=QueueResource(quota=total // 10), cpu=QueueResource(quota=-1))
        events.append(QueueObserved(event_id=f"qd{d}", ts=0.0, queue=QueueSpec(name=f"dept-{d}", resources=res)))
        for t in range(10):
            leaf = QueueResources(
                gpu=QueueResource(quota=total // 200, over_quota_weight=1 + t % 3),
                cpu=QueueResource(quota=-1),
                memory=QueueResource(quota=-1),
            )
            name = f"team-{d}-{t}"
            events.append(
                QueueObserved(
                    event_id=f"q{name}", ts=0.0, queue=QueueSpec(name=name, parent=f"dept-{d}", resources=leaf)
                )
            )
            leaves.append(name)
    running = pods * 9 // 10
    pending = pods - running
    # running pods: walk the nodes' GPUs in order; 30% are half-GPU pods sharing a device
    # Two packing cursors: the over-quota team's pods fill the first nodes (bin-packed when it borrowed idle
    # capacity), everyone else's the rest; with scatter=True all pods share one cursor (worst case for reclaim).
    hog_nodes = 0 if scatter else nodes // 5
    cursors: dict[str, list[Any]] = {"hog": [0, 0, None], "rest": [hog_nodes, 0, None]}
    limits = {"hog": hog_nodes, "rest": nodes}
    uid = 0
    for _ in range(running):
        queue = "team-0-0" if rng.random() < 0.2 else rng.choice(leaves[1:])
        pclass = "build" if rng.random() < 0.05 else "train"
        half = rng.random() < 0.3
        lane = "hog" if queue == "team-0-0" and not scatter else "rest"
        cur = cursors[lane]
        if cur[0] >= limits[lane]:
            lane = "rest" if lane == "hog" else "hog"
            cur = cursors[lane]
            if cur[0] >= limits[lane]:
                break
        node, gpu, half_slot = cur
        if half and half_slot is not None:
            (at, device), cur[2] = half_slot, None
        else:
            at, device = node, gpu
            gpu += 1
            if gpu >= GPUS_PER_NODE:
                node, gpu = node + 1, 0
            cur[0], cur[1] = node, gpu
            if half:
                cur[2] = (at, device)
        milli = 500 if half else 1000
        uid += 1
        spec = _running(uid, queue, milli, pclass, f"node-{at:05d}", device)
        events.append(PodObserved(event_id=f"p{uid}", ts=0.0, pod=spec))
    made = 0
    job = 0
    while made < pending:
        job += 1
        queue = rng.choice(leaves[1:])
        pclass = rng.choices(["train", "build", "inference"], weights=[6, 3, 1])[0]
        kind = rng.random()
        size, milli = (1, rng.choice([500, 1000, 2000, 4000])) if kind < 0.7 else (rng.randint(2, 4), 1000)
        group = None
        if size > 1:
            group = f"gang-{job}"
            pg = PodGroupSpec(namespace="bench", name=group, queue=queue, min_member=size, priority_class=pclass)
            events.append(PodGroupObserved(event_id=f"g{job}", ts=0.0, pod_group=pg))
        for k in range(size):
            uid += 1
            made += 1
            spec = _pod(f"pend-{job}-{k}", uid, queue, milli, pod_group=group, priority_class=pclass,
                        created=100_000.0 + uid)
            events.append(PodObserved(event_id=f"p{uid}", ts=0.0, pod=spec))
    state = ClusterState()
    for event in events:
        apply(state, event, state.offset + 1)
    return state


def timed(state: ClusterState, config: SchedulerConfig, repeat: int) -> tuple[float, float, Counter[str]]:
    """Median CPU seconds (this process only: the machine may be shared) and median wall seconds per cycle."""
    cpu, wall = [], []
    kinds: Counter[str] = Counter()
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        decisions = run_cycle(
            state, config, pool="default", input_offset=state.offset, code_version="bench", reuse=False
        )
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        kinds = Counter(f"{d.type}/{d.action}" for d in decisions)
    return statistics.median(cpu), statistics.median(wall), kinds


def settle(state: ClusterState) -> None:
    """Apply one full cycle's decisions and the emulated cluster's answers (binds done, evicted pods gone)."""
    answer(state, run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset, code_version="bench"))


def answer(state: ClusterState, decisions: list[Decision]) -> None:
    """Fold ``decisions``, then the emulated cluster's outcome of each."""
    for decision in decisions:
        apply(state, decision, state.offset + 1)
    for decision in decisions:
        outcome = outcome_of(decision)
        if outcome is not None:
            apply(state, outcome, state.offset + 1)


def steady_state(nodes: int = 1000, running: int = 10_000, seed: int = 5) -> ClusterState:
    """``nodes`` x 8 GPUs with ``running`` pods bound (60% half-GPU pairs, 40% whole GPUs) in 100 leaf queues."""
    rng = random.Random(seed)
    base = build(nodes, 0, seed=seed)
    leaves = sorted(name for name, q in base.queues.items() if q.parent)
    node, gpu, half_slot = 0, 0, None
    for uid in range(1, running + 1):
        half = rng.random() < 0.6
        if half and half_slot is not None:
            (at, device), half_slot = half_slot, None
        else:
            at, device = node, gpu
            gpu += 1
            if gpu >= GPUS_PER_NODE:
                node, gpu = node + 1, 0
            if half:
                half_slot = (at, device)
        milli = 500 if half else 1000
        queue = rng.choice(leaves)
        pclass = "build" if rng.random() < 0.05 else "train"
        spec = _running(uid, queue, milli, pclass, f"node-{at % nodes:05d}", device)
        apply(base, PodObserved(event_id=f"p{uid}", ts=0.0, pod=spec), base.offset + 1)
    return base


def steady(cycles: int, churn: int = 5) -> tuple[float, float]:
    """Median CPU seconds of a steady-state cycle (snapshot reused) and of a cold cycle on the same states."""
    rng = random.Random(7)
    state = steady_state()
    config = SchedulerConfig()
    leaves = sorted(name for name, q in state.queues.items() if q.parent)
    warm: list[float] = []
    cold: list[float] = []
    serial = 10**6
    now = 1.0
    for cycle in range(cycles + 1):
        now += 10.0
        running = sorted(uid for uid, p in state.pods.items() if p.phase == "Running")
        for uid in rng.sample(running, churn):
            pod = state.pods[uid]
            if rng.random() < 0.5:
                done = pod.model_copy(update={"phase": "Succeeded"})
                apply(state, PodObserved(event_id=f"d{uid}", ts=now, pod=done), state.offset + 1)
            else:
                removed = PodRemoved(event_id=f"r{uid}", ts=now, namespace=pod.namespace, name=pod.name, uid=uid)
                apply(state, removed, state.offset + 1)
        for _ in range(churn):
            serial += 1
            milli = rng.choice([500, 1000])
            spec = _pod(f"new-{serial}", serial, rng.choice(leaves), milli, priority_class="train", created=now)
            apply(state, PodObserved(event_id=f"p{serial}", ts=now, pod=spec), state.offset + 1)
        if cycle % 5 == 1:
            c0 = time.process_time()
            run_cycle(state, config, pool="default", input_offset=state.offset, code_version="bench", reuse=False)
            cold.append(time.process_time() - c0)
        c0 = time.process_time()
        decisions = run_cycle(state, config, pool="default", input_offset=state.offset, code_version="bench")
        if cycle > 0:
            warm.append(time.process_time() - c0)
        answer(state, decisions)
    return statistics.median(warm), statistics.median(cold)


def core_build() -> str:
    """Which build of the scheduler core runs: the compiled one (setup.py) or its sources."""
    from kai_stream.core.scheduler import compiled

    return "compiled (mypyc)" if compiled() else "sources (not compiled)"


def compare(state: ClusterState, repeat: int, decisions_label: str, cycle_label: str) -> None:
    """Print the full cycle's decisions and its CPU and wall time next to the allocate-only baseline's."""
    full, full_wall, kinds = timed(state, SchedulerConfig(), repeat)
    base, base_wall, _ = timed(state, SchedulerConfig(actions=("allocate",)), repeat)
    print(f"{decisions_label}: {dict(sorted(kinds.items()))}")
    print(
        f"{cycle_label}: {full:.3f} s CPU ({full_wall:.3f} s wall)   allocate-only baseline: {base:.3f} s CPU"
        f" ({base_wall:.3f} s wall)   ratio: {full / base:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--scatter", action="store_true", help="interleave the over-quota team's pods with everyone else's"
    )
    parser.add_argument("--steady-cycles", type=int, default=40)
    args = parser.parse_args()
    t0 = time.perf_counter()
    state = build(args.nodes, args.pods, scatter=args.scatter)
    print(
        f"built {len(state.nodes)} nodes, {len(state.pods)} pods, {len(state.queues)} queues "
        f"in {time.perf_counter() - t0:.1f}s; scheduler core: {core_build()}"
    )
    compare(state, args.repeat, "decisions per full cycle", "full cycle (5 actions)")
    settle(state)
    compare(state, args.repeat, "next cycle, after those decisions were applied", "next full cycle")
    warm, cold = steady(args.steady_cycles)
    print(
        f"steady-state cycle (1,000 nodes, 10,000 running, 5 finish + 5 new pending per cycle, folded back): "
        f"{warm * 1000:.1f} ms CPU   cold cycle on the same states: {cold * 1000:.1f} ms CPU   "
        f"ratio: {cold / warm:.1f}x"
    )


if __name__ == "__main__":
    main()
