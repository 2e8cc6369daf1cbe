"""Recovery time after kill -9 of the processor or of the binder (target p50 <= 5 s per component).

Everything real, as the chaos suite runs it (``tests/chaos/``): embedded broker (``--engine tansu|kafka``),
simulated Kubernetes API, connector, faust processor and binder each in its own process. The cluster has one pool
per partition of the topics (8 pools, one node each), so whichever partitions a process holds, its death stalls
some pool. Per round, one component is killed with SIGKILL and started again at once (as a supervisor would), then
one pod per pool is created through the API; the recovery time is from the kill to the last of those pods' binding
POST (201 at the simulated API). A round per component, ``--rounds`` times; a warm-up wave is bound first, so every
figure is a restart, never a first start.

``--standby``: a second processor and a second binder run in the same consumer groups (``Pipeline.add_processor``,
``add_binder``): the group spreads the partitions over both, and when one is killed the survivor takes its
partitions over once the dead member's session times out (``session_timeout_ms``, 2 s here) and rebuilds them, so
recovery does not wait for the restarted process to start (seconds of imports on a loaded machine). After each
round the bench waits ``--settle`` seconds for the restarted process to join the group again.

``--supervise``: each component runs its worker under ``kai_stream/prefork.py``; the kill is of the worker and its
supervisor forks another at once from a process that has imported everything, so the restart skips the
interpreter's start and the imports (a supervisor itself killed is a cold restart, as without the option). A
worker is killed only once it has lived ``prefork.STABLE_S``: one killed sooner is a crash loop to its supervisor,
which forks it again after a back-off, and that is not what this measures.

``--timeline``: the processor logs at INFO, and each processor round prints where its time went, from its log:
the new worker's start, the dead member's removal from the group, the join request, the join, the first and the
last partition rebuilt, then the binding (seconds after the kill).

Also printed: the machine's load average at the start and end, and the CPU seconds the interpreter takes to
import each component (what a cold restart costs before its first record).

Usage: ``python benchmarks/bench_recovery.py [--rounds 3] [--standby] [--supervise] [--engine tansu] [--timeline]``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from kai_stream import prefork
from kai_stream.connectors.simcluster.client import api_client
from kai_stream.engines import ENGINES, Engine
from kai_stream.kafka import partition_for
from kai_stream.pipeline import Pipeline, PipelineOptions

PARTITIONS = 8


def pools() -> list[str]:
    """One pool name per partition (the first names that hash onto each)."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < PARTITIONS:
        found.setdefault(partition_for(f"pool-{i}", PARTITIONS), f"pool-{i}")
        i += 1
    return [found[p] for p in sorted(found)]


def cluster_yaml() -> str:
    nodes = [
        f"""apiVersion: v1
kind: Node
metadata: {{name: node-{pool}, labels: {{kai.scheduler/node-pool: {pool}}}}}
status: {{allocatable: {{nvidia.com/gpu: "64", cpu: "256", memory: 1024Gi}}}}
"""
        for pool in pools()
    ]
    queue = """apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: q}
spec: {resources: {gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}}
"""
    return "---\n" + "---\n".join([*nodes, queue])


def _pod(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "bench",
            "labels": {"kai.scheduler/queue": "q", "kai.scheduler/node-pool": pool},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


async def _wave(pipeline: Pipeline, core: client.CoreV1Api, prefix: str, timeout_s: float = 180.0) -> None:
    """Create one pod per pool and wait until every one of them is bound."""
    names = {f"{prefix}-{pool}": pool for pool in pools()}
    create: Any = core.create_namespaced_pod  # a dict body
    for name, pool in names.items():
        await create("bench", _pod(name, pool))
    deadline = time.monotonic() + timeout_s
    while not set(names) <= {b.name for b in pipeline.cluster.bindings if b.code == 201}:
        failure = pipeline.failed()
        if failure is not None:
            raise RuntimeError(failure)
        if time.monotonic() > deadline:
            raise TimeoutError(f"wave {prefix} not bound in {timeout_s} s\n{pipeline.processor_output()[-3000:]}")
        await asyncio.sleep(0.02)


MILESTONES = (
    ("worker started", "[^Worker]: Starting..."),
    ("predecessor removed", "removed dead predecessor"),
    ("join asked", "(Re-)joining group"),
    ("joined", "Joined group"),
    ("first rebuilt", "processor: rebuilt partition"),
)
_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def timeline(log: str, killed_at: float, bound_at: float) -> str:
    """Where a processor round's time went: each milestone's first log line after the kill (and the last
    rebuild), in seconds after it."""
    seen: dict[str, float] = {}
    last_rebuild = None
    for line in log.splitlines():
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        at = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if not killed_at <= at <= bound_at:
            continue
        for name, text in MILESTONES:
            if text in line:
                seen.setdefault(name, at)
                if name == "first rebuilt":
                    last_rebuild = at
    if last_rebuild is not None:
        seen["last rebuilt"] = last_rebuild
    seen["bound"] = bound_at
    return ", ".join(f"{name} {at - killed_at:.2f}" for name, at in sorted(seen.items(), key=lambda item: item[1]))


def import_cpu_s(module: str) -> float:
    """CPU seconds (user + system) a fresh interpreter takes to import ``module``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, env={**os.environ})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


async def run(
    rounds: int, engine: Engine, standby: bool, settle_s: float, supervise: bool = False, show_timeline: bool = False
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"processor": [], "binder": []}
    kills: list[tuple[int, float, float]] = []
    forked: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "cluster.yaml"
        scenario.write_text(cluster_yaml())
        options = PipelineOptions(
            scenario=scenario, engine=engine, tick_interval_s=0.5, binder_subprocess=True, supervise=supervise,
            processor_env={"KAI_STREAM_PROCESSOR_LOG_LEVEL": "INFO"} if show_timeline else {},
        )
        async with Pipeline(options) as pipeline, api_client(pipeline.cluster.url or "") as api:
            core = client.CoreV1Api(api)
            if standby:
                pipeline.add_processor()
                pipeline.add_binder()
            await _wave(pipeline, core, "warm-up")
            if standby:
                await asyncio.sleep(settle_s)
                await _wave(pipeline, core, "warm-up-2")
            for i in range(rounds):
                for component in ("processor", "binder"):
                    if supervise and component in forked:
                        await asyncio.sleep(max(0.0, forked[component] + prefork.STABLE_S + 0.1 - time.monotonic()))
                    started = time.monotonic()
                    killed_at = time.time()
                    if supervise:
                        await pipeline.kill_worker(component)
                        forked[component] = started
                    elif component == "processor":
                        pipeline.stop_processor(kill=True)
                        pipeline.start_processor()
                    else:
                        await pipeline.stop_binder(kill=True)
                        pipeline.start_binder()
                    await _wave(pipeline, core, f"{component}-{i}")
                    times[component].append(time.monotonic() - started)
                    took = times[component][-1]
                    print(f"{component} kill {i}: every pool bound again after {took:.2f} s", flush=True)
                    if component == "processor":
                        kills.append((i, killed_at, time.time()))
                    if standby:
                        await asyncio.sleep(settle_s)
            if show_timeline:
                log = pipeline.processor_output(None)
                for i, killed_at, bound_at in kills:
                    print(f"processor kill {i} timeline (s after the kill): {timeline(log, killed_at, bound_at)}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engine", choices=ENGINES, default="tansu")
    parser.add_argument("--standby", action="store_true", help="a second processor and binder in the groups")
    parser.add_argument("--supervise", action="store_true", help="kill the components' workers; supervisors fork")
    parser.add_argument("--timeline", action="store_true", help="print where each processor recovery's time went")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds for a restarted standby to rejoin")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    times = asyncio.run(run(args.rounds, args.engine, args.standby, args.settle, args.supervise, args.timeline))
    load_after = os.getloadavg()[0]
    mode = "with a standby" if args.standby else "single instances, restarted"
    mode += ", supervised (worker killed, forked again)" if args.supervise else ""
    for component, values in times.items():
        print(
            f"{component} ({mode}, {args.engine}): recovery p50 {statistics.median(values):.2f} s, "
            f"max {max(values):.2f} s over {len(values)} kills {[round(v, 2) for v in values]} (target p50 <= 5 s)"
        )
    print(f"load average {load_before:.1f} at start, {load_after:.1f} at end (2 cores)")
    for component, module in (("processor", "kai_stream.streams.agents"), ("binder", "kai_stream.cli.binder")):
        print(f"{component}: importing {module} takes {import_cpu_s(module):.2f} CPU-s")


if __name__ == "__main__":
    main()
