"""End-to-end pipeline latency and capacity: 1,000 nodes, 10,000 pods created through the API at a steady rate,
then a burst backlog of more pods of the same size.

Everything real: embedded broker (TCP; ``--engine tansu|kafka``), simulated Kubernetes API (HTTP), Kubernetes connector,
scheduler processor (subprocess), binder (subprocess, as deployed: on this process's loop, shared with the simulated API
and the connector, its group session expired whenever the loaded machine held the loop up for seconds). Three phases
on one pipeline:

1. **Steady rate (latency)**: ``--pods`` one-GPU pods created at ``--rate`` pods/s. Prints pod-created ->
   binding-POST latency p50 / p99 (server-side clock of the simulated API: when the pod was stored, when its
   binding POST arrived; targets p50 <= 50 ms, p99 <= 250 ms) and where the time went, per stage: API ->
   cluster-events record (connector), -> BindRequested record (processor), -> binding POST (binder), from
   the records' producer timestamps. The events/s of this phase is only the creation rate (4 cluster-events
   per pod: created, bound outcome, observed bound, observed Running), so it is printed but is not a capacity.
2. **Burst (capacity)**: the processor is paused (SIGSTOP; its group session is long enough to survive it),
   ``--burst`` more one-GPU pods are created as fast as the API takes them, the connector publishes them, and
   once they are all on cluster-events the processor is resumed. Measured from the resume to the last burst
   pod's BindRequested on the decisions topic (its producer timestamp): the cluster-events records the
   processor folded in that window (from its position at the resume through the ``input_offset`` of that last
   decision, so feedback records that arrived meanwhile count only when folded) per second — every one
   decoded, folded, scheduled in cycles, and the cycles' decisions published and acknowledged by the broker.
   Also printed: the time until the binder POSTed the last burst binding.
   Baseline, same broker, same run: a plain aiokafka consumer (no group, no decoding) reading this run's whole
   cluster-events topic (the same records, burst included) from the beginning; ratio = burst records/s /
   raw records/s (target >= 0.5).
   Also printed, to show what bounds that ratio: the **in-process floor**. This process rebuilds the state the
   processor had at the resume (as a restarted processor would: the log before its position and the decisions
   decided on it), then decodes and folds the same backlog records, decides them in one cycle (the cheapest
   split: no per-cycle cost repeated) and encodes the decisions for the wire: no Kafka, no faust, no
   producer; the fastest of ``FLOOR_RUNS``. Its records/s over raw records/s is the best ratio any transport
   could reach on this machine.

3. **Restart**: the processor is SIGKILLed, one more pod is created, the processor is started again; printed: the
   seconds from its start until it decided that pod (target <= 5 s at 10,000 pods). On Apache Kafka twice: resuming
   from its engine snapshots (``kai_stream/streams/snapshots.py``), then folding both logs from offset 0.

The burst also prints the pipeline's ratio to the in-process floor of the same run (target >= 0.8 on Apache Kafka).

Both phases also print the CPU seconds per pod of the processor and binder subprocesses, of the embedded broker and
of this process (simulated API, connector, pod creation), and the steady phase how late this process's event loop
ran a 50 ms timer (p50 / p99 / max): on a shared, loaded machine the latencies mostly measure how long each process
waits for a core, the CPU figures are what changes compare.

**On a real API server** (``--cluster apiserver``): the same pipeline against etcd + kube-apiserver + KWOK
(``kai_stream/connectors/apiserver``; connector and binder with the chart's ServiceAccount tokens), and, in the
same run and
measured the same way, against the simulated cluster. For each: ``--pods`` one-GPU pods created at ``--rate`` on
``--nodes`` nodes; time from the first creation until a pod watch (this process, raw JSON lines) saw the last one
bound, pods bound/s, pod-created (its create answered) -> seen bound p50 / p99, and the CPU seconds of every
process (kube-apiserver, etcd and KWOK too). Then the ratios real / simulated. No burst phase there. Before the
real cluster's run, ``--idle`` seconds of it idle (default 60): the cluster-events records the connector published
per minute, by kind, and how many re-published an object whose content had not changed. The scenario's objects
are loaded 16 requests at a time (``ControlPlane.load_objects``).

Usage: ``python benchmarks/bench_pipeline.py [--nodes 1000] [--pods 10000] [--rate 100] [--burst 5000]
[--cluster sim|apiserver] [--idle 60]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config

import kai_stream
from kai_stream import hoptrace
from kai_stream.binder.kube import api_client
from kai_stream.connectors.simcluster.client import kube_client_config
from kai_stream.connectors.simcluster.records import BindingRecord
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindRequested,
    ClusterEvent,
    DecisionsRecord,
    MalformedEvent,
    ObjectKey,
    ObservedBase,
    PodObserved,
    content_digest,
    dumps,
    event_key,
    loads_cluster_event,
    loads_decisions_record,
)
from kai_stream.core.gcpause import frozen_heap
from kai_stream.core.scheduler import compiled
from kai_stream.engines import ENGINES, Engine
from kai_stream.kafka import Record, assign_from_start, make_consumer, read_topic
from kai_stream.pipeline import Pipeline, PipelineOptions
from kai_stream.streams.engine import PartitionEngine, is_decision

UNLIMITED = {"quota": -1, "overQuotaWeight": 1, "limit": -1}
ONE_GPU = {"nvidia.com/gpu": "1", "cpu": "1"}


def cluster_yaml(nodes: int, gpus: int) -> str:
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{i:04d}", "labels": {"nvidia.com/gpu.memory": "81920"}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "128", "memory": "1024Gi"}},
        }
        for i in range(nodes)
    ]
    docs += [
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": f"team-{q}"},
            "spec": {"resources": {r: UNLIMITED for r in ("gpu", "cpu", "memory")}},
        }
        for q in range(4)
    ]
    return yaml.safe_dump_all(docs)


def pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"job-{i:05d}", "namespace": "bench", "labels": {"kai.scheduler/queue": f"team-{i % 4}"}},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "x", "resources": {"limits": ONE_GPU}}],
        },
    }


async def create_pods(url: str | client.Configuration, first: int, count: int, rate: float,
                      created: dict[str, float] | None = None) -> float:
    """Create pods ``first..first+count-1``, one every 1/rate s (as fast as the API takes them when rate <= 0);
    return the start time (perf_counter). ``created``: filled with when each create was answered."""
    configuration = kube_client_config(url) if isinstance(url, str) else url
    async with api_client(configuration) as api:
        core = client.CoreV1Api(api)
        create: Any = core.create_namespaced_pod  # a raw response with _preload_content=False, a dict body
        slots = asyncio.Semaphore(64)
        started = time.perf_counter()

        async def one(i: int) -> None:
            async with slots:
                response = await create("bench", pod(i), _preload_content=False)
                try:
                    body = await response.read()
                finally:
                    response.release()  # unreleased, its connection would stay out of the pool
                if response.status != 201:
                    raise RuntimeError(f"creating pod {i}: HTTP {response.status}: {body[:200]!r}")
                if created is not None:
                    created[pod(i)["metadata"]["name"]] = time.perf_counter()

        tasks = []
        for n in range(count):
            if rate > 0:
                delay = started + n / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(first + n)))
        await asyncio.gather(*tasks)
        return started


def process_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (NaN when it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds used by this process (simulated API, connector), by the processor and binder subprocesses and
    by the embedded broker since ``start``: unlike wall times, comparable across runs on a loaded machine."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pids = {"processor": pipeline.processor_pid, "binder": pipeline.binder_pid,
                     "broker": pipeline.broker.pid if pipeline.broker else None}
        self.start()

    def start(self) -> None:
        self.here = time.process_time()
        self.others = {name: process_cpu_s(pid) for name, pid in self.pids.items()}

    def report(self, pods: int) -> str:
        used = {name: process_cpu_s(pid) - self.others[name] for name, pid in self.pids.items()}
        used["API+connector"] = time.process_time() - self.here
        return "CPU: " + ", ".join(f"{name} {s:.1f}s ({s / pods * 1000:.2f} ms/pod)" for name, s in used.items())


class LoopLag:
    """How late this process's event loop ran a 50 ms timer (the simulated API and the connector share the loop):
    a late loop delays every API answer and record the connector publishes."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            due = time.perf_counter() + 0.05
            await asyncio.sleep(0.05)
            self.lags.append(max(0.0, time.perf_counter() - due))

    def report(self) -> str:
        self._task.cancel()
        if not self.lags:
            return "event loop lag: no sample"
        p50, p99 = quantiles([lag * 1000 for lag in self.lags])
        return f"this process's event loop lag p50 {p50:.0f} ms, p99 {p99:.0f} ms, max {max(self.lags) * 1000:.0f} ms"


def quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def read_records(pipeline: Pipeline, topic: str) -> list[Record]:
    assert pipeline.kafka is not None
    return await read_topic(pipeline.kafka, topic, timeout_s=120)


def first_observed(records: list[Record]) -> dict[str, tuple[float, int, int]]:
    """Pod name -> (producer time s, partition, offset) of its first cluster-events record."""
    seen: dict[str, tuple[float, int, int]] = {}
    for record in records:
        try:
            event = loads_cluster_event(record.value or b"")
        except MalformedEvent:
            continue
        if isinstance(event, PodObserved) and event.pod.name not in seen:
            seen[event.pod.name] = (record.timestamp / 1000, record.partition, record.offset)
    return seen


class Decided(NamedTuple):
    """A pod's first BindRequested: its producer time (s), the decision and where it is on the decisions topic."""

    at: float
    decision: BindRequested
    partition: int
    offset: int


def bind_requests(records: list[Record]) -> dict[str, Decided]:
    """Pod name -> its first BindRequested."""
    out: dict[str, Decided] = {}
    for record in records:
        try:
            decision = loads_decisions_record(record.value or b"")
        except MalformedEvent:
            continue
        if isinstance(decision, BindRequested) and decision.name not in out:
            out[decision.name] = Decided(record.timestamp / 1000, decision, record.partition, record.offset)
    return out


def burst_batches(hops_dir: Path, resumed: float, last_at: float) -> list[str]:
    """The processor's batches from the resume to the burst's last decision on the broker (``kai_stream/hoptrace.py``),
    each split in seconds after the resume: fetched off the consumer, taken by the batch loop, folded and cycled
    (decisions handed to the producer), transaction committed; and the loop thread's CPU in the fold + cycle."""
    lines = []
    for b in sorted(hoptrace.read(hops_dir, "processor"), key=lambda b: b["fetched"]):
        if b["committed"] < resumed or b["fetched"] > last_at:
            continue
        records = b["last"] - b["first"] + 1
        lines.append(f"batch p{b['partition']} {records:.0f} records: fetched {b['fetched'] - resumed:.2f}, "
                     f"taken {b['taken'] - resumed:.2f}, cycled {b['cycled'] - resumed:.2f} "
                     f"(CPU {b.get('cycle_cpu', 0.0):.2f}), committed {b['committed'] - resumed:.2f} s")
    return lines


def burst_cycles(decided: Iterable[Decided], resumed: float) -> str:
    """The cycles that bound the burst's pods (a cycle per decided input offset of a partition): how many, and per
    cycle its binds and when its last BindRequested was on the broker, in seconds after the resume."""
    cycles: dict[tuple[int, int], list[float]] = defaultdict(list)
    for at, decision, partition, _ in decided:
        cycles[(partition, decision.input_offset)].append(at)
    shown = ", ".join(f"{len(ats)} at {max(ats) - resumed:.2f}s" for _, ats in sorted(cycles.items()))
    return f"burst bound in {len(cycles)} cycles (binds, then the last on the broker after the resume): {shown}"


async def wait_bound(pipeline: Pipeline, count: int, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while pipeline.cluster.binding_count < count:
        failure = pipeline.failed()
        if failure:
            raise RuntimeError(failure)
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {pipeline.cluster.binding_count}/{count} pods bound in {timeout_s}s")
        await asyncio.sleep(0.05)


async def raw_consume(pipeline: Pipeline, topic: str, records: int) -> float:
    """Baseline: a plain group-less aiokafka consumer reads ``records`` of ``topic`` from the start; records/s."""
    assert pipeline.kafka is not None
    consumer = make_consumer(pipeline.kafka, group_id=None, max_poll_records=10_000)
    await consumer.start()
    try:
        await assign_from_start(consumer, topic)
        seen = 0
        started = time.perf_counter()
        while seen < records:
            batches = await consumer.getmany(timeout_ms=200, max_records=10_000)
            seen += sum(len(b) for b in batches.values())
        return seen / (time.perf_counter() - started)
    finally:
        await consumer.stop()


async def steady_phase(pipeline: Pipeline, pods: int, rate: float, hops_dir: Path | None = None) -> None:
    assert pipeline.cluster.url is not None
    print(f"steady: creating {pods} pods at {rate or 'max'} pods/s ...", flush=True)
    before = sum(1 for _ in await read_records(pipeline, pipeline.names.cluster_events))
    cpu = CpuMeter(pipeline)
    lag = LoopLag()
    started = await create_pods(pipeline.cluster.url, 0, pods, rate)
    created_s = time.perf_counter() - started
    await wait_bound(pipeline, pods)
    cpu_used = cpu.report(pods)
    lagged = lag.report()
    bindings = [b for b in pipeline.cluster.bindings if b.latency is not None]
    elapsed = max(b.at for b in bindings) - started
    events = await read_records(pipeline, pipeline.names.cluster_events)
    observed = first_observed(events)
    decided = bind_requests(await read_records(pipeline, pipeline.names.decisions))
    p50, p99 = quantiles([b.latency * 1000 for b in bindings if b.latency is not None])
    stages: dict[str, list[float]] = {"connector": [], "processor": [], "binder": []}
    for b in bindings:
        assert b.latency is not None
        created = b.wall - b.latency
        if b.name in observed and b.name in decided:
            seen_at, decided_at = observed[b.name][0], decided[b.name][0]
            stages["connector"].append((seen_at - created) * 1000)
            stages["processor"].append((decided_at - seen_at) * 1000)
            stages["binder"].append((b.wall - decided_at) * 1000)
    print(f"pods created in {created_s:.1f}s; bound {len(bindings)}/{pods} in {elapsed:.1f}s")
    print(f"latency pod-created -> binding POST: p50 {p50:.1f} ms, p99 {p99:.1f} ms (targets 50 / 250 ms)")
    for name, values in stages.items():
        if values:
            s50, s99 = quantiles(values)
            print(f"  stage {name:9s}: p50 {s50:7.1f} ms, p99 {s99:7.1f} ms")
    if hops_dir is not None:
        print_hops(hops_dir, bindings, observed, decided)
    print(f"  {cpu_used}")
    print(f"  {lagged}")
    print(f"  (creation-rate bound: {len(events) - before} cluster-events in {elapsed:.1f}s = "
          f"{(len(events) - before) / elapsed:,.0f} events/s, {len(bindings) / elapsed:,.0f} pods bound/s)")


def print_hops(hops_dir: Path, bindings: list[BindingRecord], observed: dict[str, tuple[float, int, int]],
               decided: dict[str, Decided]) -> None:
    """The steady phase's created -> binding POST split into hops (``kai_stream/hoptrace.py``), p50 / p99 / mean."""
    paths = []
    for b in bindings:
        if b.name in observed and b.name in decided and b.latency is not None:
            (published, partition, _), d = observed[b.name], decided[b.name]
            paths.append(hoptrace.PodPath(b.wall - b.latency, published, (partition, d.decision.input_offset),
                                          (d.partition, d.offset), b.wall))
    hops = hoptrace.split(paths, hoptrace.read(hops_dir, "processor"), hoptrace.read(hops_dir, "binder"))
    print(f"  hops of {len(hops[hoptrace.HOPS[0]])} pods (wall clock, ms):")
    for hop, values in hops.items():
        if values:
            h50, h99 = quantiles(values)
            print(f"    {hop:18s}: p50 {h50:7.1f}, p99 {h99:7.1f}, mean {statistics.fmean(values):7.1f}")
    batches = sorted(hoptrace.read(hops_dir, "processor"), key=lambda b: b["taken"] - b["cycled"])
    slow = [b for b in batches[: max(len(batches) // 100, 1)] if "cycle_cpu" in b]
    if slow:
        print(f"  the slowest 1 % of the processor's batches' fold + cycle ({len(slow)} of {len(batches)}): wall p50 "
              f"{statistics.median(b['cycled'] - b['taken'] for b in slow) * 1e3:.1f} ms, the loop thread's CPU p50 "
              f"{statistics.median(b['cycle_cpu'] for b in slow) * 1e3:.1f} ms, max wall "
              f"{(slow[0]['cycled'] - slow[0]['taken']) * 1e3:.1f} ms with {slow[0]['cycle_cpu'] * 1e3:.1f} ms CPU, "
              f"records {statistics.median(b['last'] - b['first'] + 1 for b in slow):.0f} (median), of which settling "
              f"({sum(b.get('settle_cpu', 0.0) > 0 for b in slow)} settled) "
              f"the heap (gc) p50 {statistics.median(b.get('settle_cpu', 0.0) for b in slow) * 1e3:.1f} ms CPU")


FLOOR_RUNS = 3
"""The in-process floor is computed this many times, each on a freshly rebuilt state, and the fastest kept: it runs
in this process beside the pipeline's processes, whose work can stretch a single run, and the fastest is the
strictest baseline for the ratio."""


@dataclass
class Floor:
    """What the in-process floor did and how long each part took (seconds)."""

    records: int = 0
    binds: int = 0
    fold_s: float = 0.0
    cycle_s: float = 0.0
    encode_s: float = 0.0

    @property
    def seconds(self) -> float:
        return self.fold_s + self.cycle_s + self.encode_s


def in_process_floor(
    events: list[Record], decisions: list[Record], positions: dict[int, int], backlog_end: dict[int, int]
) -> Floor:
    """Decode and fold, decide in one cycle (decisions chained and folded) and encode the backlog
    ``positions``..``backlog_end`` of each partition in this process, on the state rebuilt from the log before
    ``positions`` (see the module doc)."""
    config = SchedulerConfig()
    work: list[tuple[PartitionEngine, list[Record]]] = []
    for partition, end in sorted(backlog_end.items()):
        start = positions.get(partition, 0)
        engine = PartitionEngine.for_config(partition, config, kai_stream.__version__)
        before: list[tuple[int, ClusterEvent]] = []
        for r in events:
            if r.partition == partition and r.offset < start:
                try:
                    before.append((r.offset, loads_cluster_event(r.value or b"")))
                except MalformedEvent:
                    continue
        recorded: list[DecisionsRecord] = []
        for r in decisions:
            if r.partition != partition:
                continue
            try:
                record = loads_decisions_record(r.value or b"")
            except MalformedEvent:
                continue
            if not is_decision(record) or record.input_offset < start:
                recorded.append(record)
        engine.rebuild(before, recorded)
        work.append((engine, [r for r in events if r.partition == partition and start <= r.offset <= end]))
    floor = Floor()
    with frozen_heap():  # as the processor does after a rebuild: the state is out of the collector's scans
        for engine, backlog in work:
            started = time.perf_counter()
            for r in backlog:
                try:
                    engine.fold(r.offset, loads_cluster_event(r.value or b""))
                except MalformedEvent:
                    continue
            folded = time.perf_counter()
            out = engine.cycle(engine.pools)
            cycled = time.perf_counter()
            for item in out:
                dumps(item.record)
            floor.fold_s += folded - started
            floor.cycle_s += cycled - folded
            floor.encode_s += time.perf_counter() - cycled
            floor.records += len(backlog)
            floor.binds += sum(isinstance(item.record, BindRequested) for item in out)
    return floor


async def burst_phase(
    pipeline: Pipeline, first: int, pods: int, hops_dir: Path | None = None
) -> tuple[float, float, int]:
    """Returns (records/s folded + scheduled + published from the resume, in-process floor records/s, records in
    the topic)."""
    assert pipeline.cluster.url is not None and pipeline.connector is not None
    print(f"burst: processor paused, creating {pods} pods as fast as the API takes them ...", flush=True)
    bound_before = pipeline.cluster.binding_count
    await asyncio.sleep(1.0)  # the processor finished its last batch (a pause mid-batch is harmless, only slower)
    pipeline.signal_processor(signal.SIGSTOP)
    try:
        published_before = pipeline.connector.published
        started = await create_pods(pipeline.cluster.url, first, pods, 0)
        created_s = time.perf_counter() - started
        while pipeline.connector.published - published_before < pods:
            await asyncio.sleep(0.05)
        await pipeline.connector.flush()
        backlog_end = {r.partition: r.offset for r in await read_records(pipeline, pipeline.names.cluster_events)}
        positions = await pipeline.committed_by_partition(pipeline.processor_app_id, pipeline.names.cluster_events)
        print(f"  {pods} pods created in {created_s:.1f}s; backlog "
              f"{sum(backlog_end[p] + 1 - positions.get(p, 0) for p in backlog_end)} cluster-events records")
        resumed = time.time()
        cpu = CpuMeter(pipeline)
    finally:
        pipeline.signal_processor(signal.SIGCONT)
    resumed_perf = time.perf_counter()
    await wait_bound(pipeline, bound_before + pods)
    cpu_used = cpu.report(pods)
    all_bound_s = max(b.at for b in pipeline.cluster.bindings) - resumed_perf
    names = {pod(i)["metadata"]["name"] for i in range(first, first + pods)}
    decision_records = await read_records(pipeline, pipeline.names.decisions)
    decided = {n: d for n, d in bind_requests(decision_records).items() if n in names}
    last_at = max(d.at for d in decided.values())
    last_input: dict[int, int] = {}
    events = await read_records(pipeline, pipeline.names.cluster_events)
    observed = first_observed(events)
    for n, (_, decision, _, _) in decided.items():
        partition = observed[n][1]
        last_input[partition] = max(last_input.get(partition, -1), decision.input_offset)
    folded = sum(last_input[p] + 1 - positions.get(p, 0) for p in last_input)
    window = last_at - resumed
    rate = folded / window
    print(f"  processor: {folded} cluster-events records folded, scheduled and their decisions published in "
          f"{window:.2f}s = {rate:,.0f} records/s; last burst binding POST {all_bound_s:.2f}s after the resume")
    print(f"  {cpu_used} (from the resume until every burst pod was bound)")
    print(f"  {burst_cycles(decided.values(), resumed)}")
    if hops_dir is not None:
        for line in burst_batches(hops_dir, resumed, last_at):
            print(f"    {line}")
    floors = [in_process_floor(events, decision_records, positions, backlog_end) for _ in range(FLOOR_RUNS)]
    floor = min(floors, key=lambda f: f.seconds)
    print(f"  in-process floor runs: {', '.join(f'{f.seconds:.2f}s' for f in floors)} (the fastest is the floor)")
    floor_rate = floor.records / floor.seconds
    print(f"  in-process floor: the same {floor.records} backlog records decoded, folded, decided in one cycle "
          f"({floor.binds} binds) and encoded in this process (no Kafka, no faust) in {floor.seconds:.2f}s = "
          f"{floor_rate:,.0f} records/s (decode + fold {floor.fold_s:.2f}s, cycle with its decisions chained "
          f"and folded {floor.cycle_s:.2f}s, encode {floor.encode_s:.2f}s)")
    return rate, floor_rate, len(events)


async def restart_phase(pipeline: Pipeline, index: int, *, snapshots: bool) -> float:
    """Seconds from (re)starting a SIGKILLed processor until it decided a pod created while it was down (the
    decision's producer timestamp). ``snapshots``: the restarted processor may resume from its engine snapshots
    (Apache Kafka); without, it folds both logs from offset 0."""
    assert pipeline.cluster.url is not None and pipeline.connector is not None
    pipeline.stop_processor(kill=True)
    pipeline.options.processor_env["KAI_STREAM_PROCESSOR_SNAPSHOT_INTERVAL_S"] = "5.0" if snapshots else "0"
    published = pipeline.connector.published
    await create_pods(pipeline.cluster.url, index, 1, 0)
    while pipeline.connector.published == published:
        await asyncio.sleep(0.05)
    await pipeline.connector.flush()
    started = time.time()
    pipeline.start_processor()
    name = pod(index)["metadata"]["name"]
    deadline = time.monotonic() + 300
    while True:
        decided = bind_requests(await read_records(pipeline, pipeline.names.decisions)).get(name)
        if decided is not None:
            return decided[0] - started
        if time.monotonic() > deadline:
            raise TimeoutError(f"the restarted processor did not decide {name}:\n{pipeline.processor_output()}")
        await asyncio.sleep(0.2)


async def main(
    nodes: int,
    pods: int,
    rate: float,
    gpus: int,
    burst: int,
    engine: Engine = "tansu",
    restarts: bool = True,
    bootstrap_servers: str | None = None,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "cluster.yaml"
        scenario.write_text(cluster_yaml(nodes, gpus))
        options = _pipeline_options(
            engine,
            scenario=scenario,
            bootstrap_servers=bootstrap_servers,
            topic_prefix=f"bench{uuid.uuid4().hex[:8]}-" if bootstrap_servers else "",
            hops_dir=Path(tmp) / "hops",
        )
        async with Pipeline(options) as pipeline:
            assert pipeline.kafka is not None
            build = "compiled (mypyc)" if compiled() else "sources (not compiled)"
            load = os.getloadavg()[0]
            print(f"engine {engine}; {nodes} nodes x {gpus} GPUs; load average {load:.1f}; scheduler core {build}",
                  flush=True)
            await pipeline.wait_processor_caught_up(timeout_s=120)
            await steady_phase(pipeline, pods, rate, Path(tmp) / "hops")
            if burst > 0:
                capacity, floor, records = await burst_phase(pipeline, pods, burst, Path(tmp) / "hops")
                raw = await raw_consume(pipeline, pipeline.names.cluster_events, records)
                print(f"baseline raw aiokafka consume of the same topic (same broker, same run): {raw:,.0f} records/s")
                print(f"ratio pipeline / raw: {capacity / raw:.3f} (target >= 0.5); "
                      f"in-process floor / raw: {floor / raw:.3f} (the most any transport could give)")
                print(f"ratio pipeline / in-process floor: {capacity / floor:.3f} (target >= 0.8)")
            if restarts:
                index = pods + burst
                for snapshots in ((True, False) if engine == "kafka" else (False,)):
                    took = await restart_phase(pipeline, index, snapshots=snapshots)
                    index += 1
                    how = "from its snapshots" if snapshots else "folding both logs from offset 0"
                    print(f"processor restart (SIGKILL, then a new pod) back to deciding, {how}: {took:.2f}s "
                          f"(target <= 5 s)", flush=True)
            print(f"load average {os.getloadavg()[0]:.1f}")


class BoundWatch:
    """When each pod of ``bench`` was first seen with a node, by a watch from the current resourceVersion read as
    raw JSON lines (kubernetes-asyncio's models would cost this process more than the rest of it); a watch the
    server ends is resumed from the last resourceVersion seen."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.bound_at: dict[str, float] = {}
        self.started = asyncio.Event()

    async def run(self) -> None:
        v1 = client.CoreV1Api(self.api)
        version = (await v1.list_namespaced_pod("bench", limit=1)).metadata.resource_version
        while True:
            watch: Any = v1.list_namespaced_pod  # a raw response with _preload_content=False
            response = await watch(
                "bench", watch=True, resource_version=version, allow_watch_bookmarks=True, timeout_seconds=3600,
                _preload_content=False, _request_timeout=3600)
            self.started.set()
            try:
                async for line in response.content:
                    event = orjson.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise RuntimeError(f"pod watch: {obj.get('message')}")
                    version = obj["metadata"]["resourceVersion"]
                    if (obj.get("spec") or {}).get("nodeName"):
                        self.bound_at.setdefault(obj["metadata"]["name"], time.perf_counter())
            finally:
                response.release()


@dataclass
class BindFigures:
    """One cluster's figures of ``bind_all``."""

    cluster: str
    pods: int
    seconds: float
    p50_ms: float
    p99_ms: float
    cpu_s: dict[str, float]

    @property
    def pods_per_s(self) -> float:
        return self.pods / self.seconds

    def report(self) -> str:
        cpu = ", ".join(f"{name} {s:.1f}s" for name, s in self.cpu_s.items())
        return (f"{self.cluster}: {self.pods} pods bound in {self.seconds:.1f}s = {self.pods_per_s:,.1f} pods/s; "
                f"created -> seen bound p50 {self.p50_ms:.0f} ms, p99 {self.p99_ms:.0f} ms; CPU: {cpu}")


async def bind_all(pipeline: Pipeline, cluster: str, configuration: client.Configuration, pids: dict[str, int],
                   pods: int, rate: float, timeout_s: float = 1800) -> BindFigures:
    """Create ``pods`` one-GPU pods at ``rate`` and wait until the watch saw every one bound."""
    await pipeline.wait_processor_caught_up(timeout_s=600)
    async with api_client(configuration) as api:
        watcher = BoundWatch(api)
        watching = asyncio.create_task(watcher.run())
        await asyncio.wait_for(watcher.started.wait(), 60)
        processes = {"processor": pipeline.processor_pid, "binder": pipeline.binder_pid,
                     "broker": pipeline.broker.pid if pipeline.broker else None, **pids}
        before = {name: process_cpu_s(pid) for name, pid in processes.items()}
        here = time.process_time()
        created: dict[str, float] = {}
        print(f"{cluster}: creating {pods} pods at {rate or 'max'} pods/s ...", flush=True)
        started = await create_pods(configuration, 0, pods, rate, created)
        deadline = time.monotonic() + timeout_s
        try:
            while len(watcher.bound_at) < pods:
                if (failure := pipeline.failed()) is not None:
                    raise RuntimeError(failure)
                if watching.done():
                    raise RuntimeError(f"the pod watch ended: {watching.exception()!r}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{cluster}: only {len(watcher.bound_at)}/{pods} bound in {timeout_s}s")
                await asyncio.sleep(0.1)
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        cpu = {name: process_cpu_s(pid) - before[name] for name, pid in processes.items()}
        cpu["this process (connector" + (", simulated API)" if cluster == "sim" else ")")] = (
            time.process_time() - here)
    p50, p99 = quantiles([(watcher.bound_at[n] - at) * 1000 for n, at in created.items()])
    return BindFigures(cluster, pods, max(watcher.bound_at.values()) - started, p50, p99, cpu)


async def idle_records(pipeline: Pipeline, seconds: float) -> str:
    """What the connector publishes while nothing happens: the cluster-events records appended in ``seconds``, by
    kind, and how many of the observed ones repeat the content (``content_digest``) of the object's previous
    record on that partition, i.e. re-publish an unchanged object."""
    before = await read_records(pipeline, pipeline.names.cluster_events)
    await asyncio.sleep(seconds)
    after = await read_records(pipeline, pipeline.names.cluster_events)
    known: dict[tuple[int, ObjectKey], str] = {}
    ends: dict[int, int] = {}
    for record in before:
        ends[record.partition] = record.offset
        event = _decoded(record)
        if isinstance(event, ObservedBase) and (key := event_key(event)) is not None:
            known[(record.partition, key)] = content_digest(event)
    kinds: dict[str, int] = {}
    new = repeated = 0
    for record in after:
        if record.offset <= ends.get(record.partition, -1):
            continue
        new += 1
        event = _decoded(record)
        kinds[type(event).__name__] = kinds.get(type(event).__name__, 0) + 1
        if isinstance(event, ObservedBase) and (key := event_key(event)) is not None:
            digest = content_digest(event)
            repeated += known.get((record.partition, key)) == digest
            known[(record.partition, key)] = digest
    by_kind = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
    return (f"idle {seconds:.0f}s: {new} cluster-events records = {new / seconds * 60:,.0f}/min ({by_kind}); "
            f"{repeated} re-published an object with unchanged content")


def _decoded(record: Record) -> ClusterEvent | None:
    try:
        return loads_cluster_event(record.value or b"")
    except MalformedEvent:
        return None


def _pipeline_options(engine: Engine, hops_dir: Path | None = None, **kwargs: Any) -> PipelineOptions:
    """Options of every run: no tail; a group session long enough for the burst phase's pause (Tansu holds the
    first join for half of it); with ``hops_dir``, the processor and the binder trace their batches there."""
    session = {"KAI_STREAM_KAFKA_SESSION_TIMEOUT_MS": "30000", "KAI_STREAM_KAFKA_HEARTBEAT_INTERVAL_MS": "1000"}
    if hops_dir is not None:
        session["KAI_STREAM_HOP_TRACE_DIR"] = str(hops_dir)
    return PipelineOptions(engine=engine, tick_interval_s=1.0, tail=False, processor_env=session,
                           binder_subprocess=True, **kwargs)


async def compare_apiserver(nodes: int, pods: int, rate: float, gpus: int, engine: Engine, idle_s: float = 0) -> None:
    """The same bind-all run on the simulated cluster, then on etcd + kube-apiserver + KWOK; their ratios. With
    ``idle_s``, first what the connector publishes from the idle real cluster (``idle_records``)."""
    from kai_stream.connectors.apiserver import ControlPlane

    print(f"engine {engine}; {nodes} nodes x {gpus} GPUs; load average {os.getloadavg()[0]:.1f}; scheduler core "
          f"{'compiled (mypyc)' if compiled() else 'sources (not compiled)'}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "cluster.yaml"
        scenario.write_text(cluster_yaml(nodes, gpus))
        async with Pipeline(_pipeline_options(engine, scenario=scenario)) as pipeline:
            assert pipeline.cluster.url is not None
            sim = await bind_all(pipeline, "sim", kube_client_config(pipeline.cluster.url), {}, pods, rate)
        print(sim.report(), flush=True)
    with ControlPlane() as plane:
        started = time.perf_counter()
        objs = list(yaml.safe_load_all(cluster_yaml(nodes, gpus)))
        await asyncio.to_thread(plane.load_objects, objs)
        plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
        print(f"apiserver: control plane up, {nodes} nodes loaded in {time.perf_counter() - started:.0f}s", flush=True)
        options = _pipeline_options(engine, kubeconfig=plane.service_account_kubeconfig("connector"),
                                    binder_kubeconfig=plane.service_account_kubeconfig("binder"))
        admin = client.Configuration()
        await kube_config.load_kube_config(config_file=str(plane.kubeconfig), client_configuration=admin)
        async with Pipeline(options) as pipeline:
            if idle_s > 0:
                await pipeline.wait_processor_caught_up(timeout_s=600)
                print(f"apiserver: {await idle_records(pipeline, idle_s)}", flush=True)
            real = await bind_all(pipeline, "apiserver", admin, plane.pids(), pods, rate)
        print(real.report(), flush=True)
    print(f"ratio apiserver / sim: pods/s {real.pods_per_s / sim.pods_per_s:.2f}, p50 latency "
          f"{real.p50_ms / sim.p50_ms:.2f}x, p99 latency {real.p99_ms / sim.p99_ms:.2f}x; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=100.0, help="pods created per second (0: as fast as possible)")
    parser.add_argument("--burst", type=int, default=5000, help="pods of the burst (capacity) phase; 0 to skip")
    parser.add_argument("--gpus", type=int, default=16, help="GPUs per node")
    parser.add_argument("--engine", choices=ENGINES, default="tansu", help="the embedded broker")
    parser.add_argument("--no-restarts", action="store_true", help="skip the processor restart phase")
    parser.add_argument("--bootstrap-servers", help="a running broker of --engine (topics under a fresh prefix)")
    parser.add_argument("--cluster", choices=("sim", "apiserver"), default="sim",
                        help="apiserver: bind-all on etcd + kube-apiserver + KWOK beside the simulated cluster")
    parser.add_argument("--idle", type=float, default=60.0,
                        help="--cluster apiserver: seconds of the idle real cluster to count the records of (0: skip)")
    args = parser.parse_args()
    if args.cluster == "apiserver":
        asyncio.run(compare_apiserver(args.nodes, args.pods, args.rate, args.gpus, args.engine, args.idle))
    else:
        asyncio.run(main(
            args.nodes, args.pods, args.rate, args.gpus, args.burst, args.engine, not args.no_restarts,
            args.bootstrap_servers,
        ))
