"""What the processor's event loop spends per cycle at the pipeline benchmark's scale, in process (no Kafka).

Feeds one ``PartitionEngine`` the records ``bench_pipeline.py`` makes the processor fold (nodes of 16 GPUs, four
unlimited queues, one-GPU pods created at ``--rate`` per simulated second, each bound and then seen Running, a
Tick every second) and does on the same thread what ``SchedulerRuntime.submit`` does around it: a cycle after
each record, the queue gauges from a cycle's session every second, the fair-share refresh on a Tick every 10 s
when stale, and (unless ``--no-freeze``) the heap settled and frozen every 10 s. Prints wall and CPU quantiles per
kind of cycle, the snapshot builds that were not reuses, the full (generation 2) garbage collections, and the
cycles over ``--slow-ms`` with what coincided with them; then the cost of forking the process (``encode_aside``).

    python benchmarks/bench_processor_loop.py --nodes 1000 --pods 10000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindRequested,
    ClusterEvent,
    NodeObserved,
    NodeSpec,
    PodObserved,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
    Tick,
)
from kai_stream.core.gcpause import settle_heap
from kai_stream.core.scheduler.framework import reuse
from kai_stream.core.scheduler.framework.session import Session
from kai_stream.emulation import outcome_of
from kai_stream.streams import snapshots
from kai_stream.streams.engine import Outgoing, PartitionEngine
from kai_stream.streams.queue_metrics import QueueMeter

GIB = 2**30
POOL = "default"


class Loop:
    """The engine, the simulated clock and what was measured."""

    def __init__(self, nodes: int, freeze: bool, slow_s: float) -> None:
        self.engine = PartitionEngine.for_config(0, SchedulerConfig(), "bench")
        self.meter = QueueMeter(POOL)
        self.freeze, self.slow_s = freeze, slow_s
        self.offset = 0
        self.now = 0.0
        self.metered_at = -1.0
        self.fair_at = -10.0
        self.fair_stale = True
        self.wall: dict[str, list[float]] = defaultdict(list)
        self.cpu: dict[str, list[float]] = defaultdict(list)
        self.builds: list[float] = []
        self.full_gcs: list[tuple[float, float]] = []
        self.slow: list[str] = []
        self.specs: dict[str, PodSpec] = {}
        for i in range(nodes):
            allocatable = Resources(gpu_milli=16_000, cpu_milli=128_000, memory=1024 * GIB)
            node = NodeSpec(name=f"node-{i:04d}", allocatable=allocatable, gpu_memory_mib=81920)
            self.fold(NodeObserved(event_id=f"n{i}", ts=0.0, node=node))
        unlimited = QueueResource(quota=-1, over_quota_weight=1, limit=-1)
        for q in range(4):
            resources = QueueResources(gpu=unlimited, cpu=unlimited, memory=unlimited)
            self.fold(QueueObserved(event_id=f"q{q}", ts=0.0, queue=QueueSpec(name=f"team-{q}", resources=resources)))

    def fold(self, event: ClusterEvent) -> None:
        self.offset += 1
        self.engine.fold(self.offset, event)
        if not isinstance(event, Tick):
            self.fair_stale = True

    def timed(self, kind: str, work: Callable[[], Any]) -> Any:
        builds, collections = len(self.builds), len(self.full_gcs)
        c0, t0 = time.process_time(), time.perf_counter()
        result = work()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        self.wall[kind].append(wall)
        self.cpu[kind].append(cpu)
        if wall > self.slow_s:
            self.slow.append(f"t={self.now:6.1f}s {kind}: {wall * 1e3:.1f} ms wall, {cpu * 1e3:.1f} ms CPU, "
                             f"cold snapshot builds {len(self.builds) - builds}, full collections "
                             f"{len(self.full_gcs) - collections}")
        return result

    def cycle(self, kind: str) -> list[Outgoing]:
        inspect: Mapping[str, Callable[[Session], None]] | None = None
        if self.now - self.metered_at >= 1.0:
            inspect, self.metered_at, kind = {POOL: self.meter.session}, self.now, kind + " + gauges"
        out: list[Outgoing] = self.timed(kind, lambda: self.engine.cycle([POOL], inspect))
        return out

    def tick(self, at: float) -> None:
        self.fold(Tick(event_id=f"t{at}", ts=at))
        self.cycle("Tick")
        if self.fair_stale and at - self.fair_at >= 10.0:
            self.timed("fair-share refresh", lambda: self.engine.fair_shares(POOL))
            self.fair_at, self.fair_stale = at, False
        if self.freeze and int(at) % 10 == 0:
            self.timed("settle heap", settle_heap)

    def pod(self, i: int) -> None:
        requests = Resources(gpu_milli=1000, cpu_milli=1000)
        spec = PodSpec(namespace="bench", name=f"job-{i:05d}", uid=f"u{i}", queue=f"team-{i % 4}",
                       requests=requests, created=self.now)
        self.specs[spec.uid] = spec
        self.fold(PodObserved(event_id=f"p{i}", ts=self.now, pod=spec))
        for item in self.cycle("PodObserved pending"):
            if isinstance(item.record, BindRequested):
                self.answer(item.record)

    def answer(self, bind: BindRequested) -> None:
        outcome = outcome_of(bind)
        assert outcome is not None
        self.fold(outcome)
        self.cycle("PodBound")
        running = self.specs[bind.uid].model_copy(
            update={"node_name": bind.node, "gpu_indices": bind.gpu_indices, "phase": "Running", "started": self.now}
        )
        self.fold(PodObserved(event_id=f"r{bind.uid}", ts=self.now, pod=running))
        self.cycle("PodObserved running")

    def report(self) -> None:
        for kind in sorted(self.wall):
            wall, cpu = sorted(self.wall[kind]), sorted(self.cpu[kind])
            n = len(wall)
            print(f"  {kind:28s} n={n:6d}  wall p50 {wall[n // 2] * 1e3:6.2f} p99 {wall[n * 99 // 100] * 1e3:7.2f} "
                  f"max {wall[-1] * 1e3:7.1f} ms  CPU p99 {cpu[n * 99 // 100] * 1e3:6.2f} max {cpu[-1] * 1e3:7.1f} ms")
        print(f"  cold snapshot builds (Snapshot.build): {len(self.builds)}, at t = "
              f"{[round(t) for t in self.builds[:10]]}")
        print(f"  full collections: {len(self.full_gcs)}, ms: {[round(ms) for _, ms in self.full_gcs[:20]]}")
        print(f"  cycles over the slow threshold: {len(self.slow)}")
        for line in self.slow[:20]:
            print("    " + line)


def watch(loop: Loop) -> None:
    """Count ``Snapshot.build`` calls and time generation-2 collections into ``loop``."""
    build = reuse.Snapshot.build.__func__  # type: ignore[attr-defined]

    def counted(cls: type[reuse.Snapshot], *args: Any, **kwargs: Any) -> reuse.Snapshot:
        loop.builds.append(loop.now)
        built: reuse.Snapshot = build(cls, *args, **kwargs)
        return built

    reuse.Snapshot.build = classmethod(counted)  # type: ignore[method-assign, assignment]
    started = [0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif info["generation"] == 2:
            loop.full_gcs.append((loop.now, (time.perf_counter() - started[0]) * 1e3))

    gc.callbacks.append(collected)


async def fork_cost(loop: Loop) -> None:
    """The fork and the parent's cycles while a forked child encodes the engine (``snapshots.encode_aside``)."""
    settle_heap()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    forked = time.perf_counter() - started
    os.waitpid(pid, 0)
    encoding = asyncio.ensure_future(snapshots.encode_aside(snapshots.Snapshot(loop.engine, 0)))
    during: list[float] = []
    while not encoding.done():
        loop.fold(Tick(event_id=f"e{len(during)}", ts=loop.now))
        t0 = time.perf_counter()
        loop.engine.cycle([POOL])
        during.append(time.perf_counter() - t0)
        await asyncio.sleep(0.01)
    size = len(await encoding)
    print(f"  fork: {forked * 1e3:.1f} ms wall; snapshot encoded aside: {size / 1e6:.1f} MB, the parent's cycles "
          f"meanwhile: {len(during)}, max {max(during, default=0) * 1e3:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=25.0, help="pods created per simulated second")
    parser.add_argument("--slow-ms", type=float, default=50.0)
    parser.add_argument("--no-freeze", action="store_true", help="never settle and freeze the heap")
    args = parser.parse_args()
    loop = Loop(args.nodes, not args.no_freeze, args.slow_ms / 1e3)
    watch(loop)
    started, next_tick = time.perf_counter(), 1.0
    for i in range(args.pods):
        loop.now = i / args.rate
        while loop.now >= next_tick:
            loop.tick(next_tick)
            next_tick += 1.0
        loop.pod(i)
    print(f"{args.nodes} nodes x 16 GPUs, {args.pods} pods at {args.rate:g}/s simulated, heap frozen every 10 s: "
          f"{not args.no_freeze}; {time.perf_counter() - started:.1f} s wall, load average {os.getloadavg()[0]:.1f}")
    loop.report()
    asyncio.run(fork_cost(loop))


if __name__ == "__main__":
    main()
