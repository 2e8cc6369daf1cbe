"""Chaos, long form: kill -9 of every component and of the broker under a 10,000-pod load, plus hostile records.

Everything real and every component its own process (``tests/chaos/`` is the short form CI runs): the embedded
broker (``--engine kafka``: Apache Kafka, its log on disk, so a broker kill is survivable; ``--engine tansu``: its
memory log dies with it, and its durable storage is refused, so the broker is not killed there), the simulated
Kubernetes API (HTTP, in this process), and the connector, processor and binder as ``kai-stream`` processes.

While ``--pods`` pods are created at ``--rate`` (whole-GPU pods, half-GPU fractions and 4-pod gangs with a
PodGroup of minMember 4, in four queues; the cluster has room for all of them), every ``--kill-every`` seconds one
component in turn (connector, processor, binder, and the broker ``--broker-kills`` times) is killed with SIGKILL
and started again at once, as a supervisor would; then a probe pod is created, and the component's recovery time
is from the kill until that pod's binding POST was accepted. A component that exits on its own is started again
and counted. Meanwhile ``--hostile`` hostile records go to cluster-events: garbage bytes, deep nesting, negative
GPUs, integers above 2^64, ``ts: 1e999``, a pool on the wrong partition, 900 kB of undecodable bytes, and
replays of real observations of pods that were bound since (the same record again: its event id is folded once;
the same observation under a new id: its resource version is not newer than the bind's).

Every ``--sample-every`` seconds the simulated cluster's pods are checked: no GPU device of a node holds more than
one GPU (whole pods and fractions by their device indices), no node more devices than it has.

At the end (every pod bound, the log quiet): pods lost (created and never bound), double binds (a pod with two
accepted binding POSTs), ``audit invariants`` over the whole log (capacity observed/decided/reserved, bound
twice, partial gangs, unrecorded evictions, unaccounted pods) and the hash chain, ``replay`` (every decision
rebuilt byte for byte), and the hostile records: each one either dead-lettered with a reason (matched by its
offset) or harmless (the duplicates; no letter needed, their harmlessness is what the invariants and the replay
prove). Exit status 1 when any promise is broken.

``--supervise``: the components run their workers under ``kai_stream/prefork.py`` and the kills hit the workers,
which their supervisors fork again at once (the broker is still restarted cold).

Usage: ``python benchmarks/bench_chaos.py [--pods 10000] [--nodes 800] [--rate 40] [--engine kafka] [--supervise]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from kubernetes_asyncio import client

from kai_stream.connectors.simcluster.client import api_client
from kai_stream.core.events import DEFAULT_POOL, DeadLetter, PodObserved, loads_cluster_event
from kai_stream.core.manifests import ANNOTATION_GPU_FRACTION, ANNOTATION_GPU_INDICES, ANNOTATION_POD_GROUP
from kai_stream.engines import ENGINES
from kai_stream.history.reader import read_broker
from kai_stream.invariants import check_history
from kai_stream.kafka import Record, make_producer, partition_for, read_topic
from kai_stream.pipeline import Pipeline, PipelineOptions
from kai_stream.replay.runner import replay_history

NAMESPACE = "chaos"
GANG = 4
UNLIMITED = {"quota": -1, "overQuotaWeight": 1, "limit": -1}


def cluster_yaml(nodes: int, gpus: int) -> str:
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i:04d}"},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "256", "memory": "2048Gi"}},
        }
        for i in range(nodes)
    ]
    docs += [
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": f"team-{q}"},
         "spec": {"resources": {r: UNLIMITED for r in ("gpu", "cpu", "memory")}}}
        for q in range(4)
    ]
    return yaml.safe_dump_all(docs)


def pod_body(name: str, queue: str, *, fraction: bool = False, gang: str | None = None) -> dict[str, Any]:
    annotations = {ANNOTATION_GPU_FRACTION: "0.5"} if fraction else {}
    if gang is not None:
        annotations[ANNOTATION_POD_GROUP] = gang
    limits = {"cpu": "1"} if fraction else {"nvidia.com/gpu": "1", "cpu": "1"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kai.scheduler/queue": queue},
                     "annotations": annotations},
        "spec": {"schedulerName": "kai-scheduler",
                 "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
    }


def gang_body(name: str, queue: str) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"minMember": GANG, "queue": queue}}


@dataclass
class Run:
    """What the run saw, printed at the end."""

    created: list[str] = field(default_factory=list)
    gangs: dict[str, list[str]] = field(default_factory=dict)
    kills: Counter[str] = field(default_factory=Counter)
    unplanned: Counter[str] = field(default_factory=Counter)
    recovery: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    hostile_lettered: dict[tuple[int, int], str] = field(default_factory=dict)
    """(partition, offset) -> kind, for the records that must be dead-lettered."""
    hostile_harmless: Counter[str] = field(default_factory=Counter)
    samples: int = 0
    overcommitted: list[str] = field(default_factory=list)
    creating: bool = True


class Bindings:
    """The pods whose binding POST was accepted, read incrementally from the simulated API's record."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.seen = 0
        self.accepted: Counter[str] = Counter()

    def update(self) -> Counter[str]:
        records = self.pipeline.cluster.bindings
        for record in records[self.seen:]:
            if record.code == 201:
                self.accepted[record.name] += 1
        self.seen = len(records)
        return self.accepted


async def create(api: client.ApiClient, body: dict[str, Any]) -> None:
    if body["kind"] == "PodGroup":
        groups: Any = client.CustomObjectsApi(api).create_namespaced_custom_object
        await groups("scheduling.run.ai", "v2alpha2", NAMESPACE, "podgroups", body)
    else:
        pods: Any = client.CoreV1Api(api).create_namespaced_pod
        await pods(NAMESPACE, body)


def workload(pods: int) -> list[dict[str, Any]]:
    """``pods`` pods in order of creation: of every 10, 6 whole-GPU pods, 2 half-GPU fractions, and a 4-pod gang
    every other 10 (its PodGroup first)."""
    bodies: list[dict[str, Any]] = []
    made = 0
    for block in itertools.count():
        if made >= pods:
            return bodies
        queue = f"team-{block % 4}"
        for i in range(6):
            bodies.append(pod_body(f"b{block}-w{i}", queue))
        for i in range(2):
            bodies.append(pod_body(f"b{block}-f{i}", queue, fraction=True))
        made += 8
        if block % 2 == 0 and made + GANG <= pods:
            gang = f"b{block}-gang"
            bodies.append(gang_body(gang, queue))
            bodies += [pod_body(f"{gang}-{i}", queue, gang=gang) for i in range(GANG)]
            made += GANG
    raise AssertionError("unreachable")


async def creator(api: client.ApiClient, run: Run, pods: int, rate: float) -> None:
    started = time.monotonic()
    slots = asyncio.Semaphore(32)
    tasks = []
    count = 0

    async def one(body: dict[str, Any]) -> None:
        async with slots:
            await create(api, body)

    for body in workload(pods):
        if body["kind"] == "Pod":
            delay = started + count / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            count += 1
            run.created.append(body["metadata"]["name"])
            gang = body["metadata"]["annotations"].get(ANNOTATION_POD_GROUP)
            if gang is not None:
                run.gangs.setdefault(gang, []).append(body["metadata"]["name"])
            tasks.append(asyncio.create_task(one(body)))
        else:
            await create(api, body)
    await asyncio.gather(*tasks)
    run.creating = False


def overcommitted(pipeline: Pipeline, gpus: int) -> list[str]:
    """Nodes of the simulated cluster with a GPU device over one GPU or more devices in use than it has."""
    used: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for pod in pipeline.cluster.objects("Pod", NAMESPACE):
        node = pod["spec"].get("nodeName")
        annotations = pod["metadata"].get("annotations") or {}
        if node is None:
            continue
        share = 500 if ANNOTATION_GPU_FRACTION in annotations else 1000
        for index in (i for i in annotations.get(ANNOTATION_GPU_INDICES, "").split(",") if i):
            used[node][int(index)] += share
    return [
        f"{node}: devices {dict(devices)}"
        for node, devices in sorted(used.items())
        if any(milli > 1000 for milli in devices.values()) or any(not 0 <= i < gpus for i in devices)
    ]


async def sampler(pipeline: Pipeline, run: Run, gpus: int, every_s: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        run.samples += 1
        run.overcommitted += [f"sample {run.samples}: {found}" for found in overcommitted(pipeline, gpus)]
        await asyncio.sleep(every_s)


def hostile_records(other_pool: str, observed: list[Record], n: int) -> list[tuple[str, bytes]]:
    """``n`` hostile records as (kind, bytes), kinds in turn; replays of ``observed`` (real Pending observations
    of pods bound since) are the harmless kinds."""
    base = orjson.loads(observed[0].value or b"{}")
    negative = {**base, "event_id": "", "pod": {**base["pod"], "requests": {**base["pod"]["requests"],
                                                                             "gpu_milli": -8000}}}
    huge_int = {**negative, "pod": {**negative["pod"], "requests": {**negative["pod"]["requests"],
                                                                      "gpu_milli": 2**70}}}

    def kinds(i: int) -> list[tuple[str, bytes]]:
        replay = observed[i % len(observed)].value or b""
        renamed = {**orjson.loads(replay), "event_id": f"chaos-renamed-{i}"}
        return [
            ("garbage", b"\x00\xff garbage \xfe" * (1 + i % 50)),
            ("deep nesting", b"[" * 5000),
            ("negative GPUs", orjson.dumps({**negative, "event_id": f"chaos-negative-{i}"})),
            ("integer above 2^64", json.dumps({**huge_int, "event_id": f"chaos-huge-{i}"}).encode()),
            ("ts 1e999", b'{"type":"Tick","event_id":"chaos-inf-%d","ts":1e999}' % i),
            ("wrong partition", orjson.dumps({"type": "Tick", "event_id": f"chaos-mis-{i}", "ts": 1.0,
                                              "pool": other_pool})),
            ("duplicate observation", replay),
            ("stale observation, new id", orjson.dumps(renamed)),
        ]

    return [kinds(i // 8)[i % 8] for i in range(n)]


HARMLESS = frozenset({"duplicate observation", "stale observation, new id"})


async def hostile(pipeline: Pipeline, run: Run, total: int, duration_s: float, bindings: Bindings) -> None:
    """Send ``total`` hostile records over ``duration_s`` seconds, plus two 900 kB undecodable records."""
    assert pipeline.kafka is not None
    names = pipeline.names
    while len(bindings.update()) < 100:
        await asyncio.sleep(0.5)
    bound = set(bindings.accepted)
    events = await read_topic(pipeline.kafka, names.cluster_events)
    observed = [
        r for r in events
        if isinstance(e := loads_cluster_event(r.value or b""), PodObserved)
        and e.pod.node_name is None and e.pod.name in bound
    ]
    producer = make_producer(pipeline.kafka, max_request_size=2**21)
    await producer.start()
    try:
        partitions = len(await producer.partitions_for(names.cluster_events))
        partition = partition_for(DEFAULT_POOL, partitions)
        other = next(f"p{i}" for i in range(100) if partition_for(f"p{i}", partitions) != partition)
        records = hostile_records(other, observed, total)
        records[1:1] = [("900 kB undecodable", b"\xff" * 900_000)] * 2
        started = time.monotonic()
        for i, (kind, value) in enumerate(records):
            delay = started + i * duration_s / len(records) - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            while True:
                try:
                    meta = await producer.send_and_wait(names.cluster_events, value, partition=partition)
                    break
                except Exception as exc:  # the broker is being restarted: send it again
                    print(f"hostile: send failed ({exc!r}), again in 1 s", flush=True)
                    await asyncio.sleep(1.0)
            if kind in HARMLESS:
                run.hostile_harmless[kind] += 1
            else:
                run.hostile_lettered[(meta.partition, meta.offset)] = kind
    finally:
        await producer.stop()


async def kill(pipeline: Pipeline, component: str) -> None:
    if component != "broker" and pipeline.options.supervise:
        await pipeline.kill_worker(component)
    elif component == "connector":
        await pipeline.stop_connector(kill=True)
        pipeline.start_connector()
    elif component == "processor":
        pipeline.stop_processor(kill=True)
        pipeline.start_processor()
    elif component == "binder":
        await pipeline.stop_binder(kill=True)
        pipeline.start_binder()
    else:
        await pipeline.restart_broker(kill=True)


async def chaos(pipeline: Pipeline, api: client.ApiClient, run: Run, bindings: Bindings, every_s: float,
                broker_kills: int, pods: int) -> None:
    """Kill one component in turn every ``every_s`` while pods are created (after the last kill's recovery); the
    broker's kills are spread evenly over the pods' creation."""
    order = itertools.cycle(["connector", "processor", "binder"])
    while True:
        await asyncio.sleep(every_s)
        if not run.creating:
            return
        due = run.kills["broker"] < broker_kills and len(run.created) >= pods * (run.kills["broker"] + 1) / (
            broker_kills + 1)
        component = "broker" if due else next(order)
        started = time.monotonic()
        await kill(pipeline, component)
        run.kills[component] += 1
        probe = f"probe-{component}-{run.kills[component]}"
        await create(api, pod_body(probe, "team-0"))
        run.created.append(probe)
        while probe not in bindings.update():
            await asyncio.sleep(0.05)
        run.recovery[component].append(time.monotonic() - started)
        print(f"{component} kill {run.kills[component]}: probe bound {run.recovery[component][-1]:.2f} s after "
              f"the kill; {len(bindings.accepted)}/{len(run.created)} pods bound", flush=True)


async def supervise(pipeline: Pipeline, run: Run, stop: asyncio.Event) -> None:
    while not stop.is_set():
        for name in pipeline.restart_exited():
            run.unplanned[name] += 1
            print(f"{name} exited on its own: started again", flush=True)
        await asyncio.sleep(0.5)


async def main(args: argparse.Namespace) -> int:
    run = Run()
    broker_kills = args.broker_kills if args.engine == "kafka" else 0
    with tempfile.TemporaryDirectory(prefix="kai-stream-chaos-") as tmp:
        scenario = Path(tmp) / "cluster.yaml"
        scenario.write_text(cluster_yaml(args.nodes, args.gpus))
        options = PipelineOptions(
            scenario=scenario, engine=args.engine, durable=args.engine == "kafka", data_dir=Path(tmp) / "data",
            tick_interval_s=1.0, binder_subprocess=True, connector_subprocess=True, tail=False,
            supervise=args.supervise,
        )
        async with Pipeline(options) as pipeline, api_client(pipeline.cluster.url or "") as api:
            assert pipeline.kafka is not None
            bindings = Bindings(pipeline)
            stop = asyncio.Event()
            duration = args.pods / args.rate
            background = [
                asyncio.create_task(sampler(pipeline, run, args.gpus, args.sample_every, stop)),
                asyncio.create_task(supervise(pipeline, run, stop)),
            ]
            await create(api, pod_body("warm-up", "team-0"))
            run.created.append("warm-up")
            while "warm-up" not in bindings.update():
                await asyncio.sleep(0.1)
            started = time.monotonic()
            await asyncio.gather(
                creator(api, run, args.pods, args.rate),
                hostile(pipeline, run, args.hostile, duration * 0.8, bindings),
                chaos(pipeline, api, run, bindings, args.kill_every, broker_kills, args.pods),
            )
            deadline = time.monotonic() + args.timeout
            while len(bindings.update()) < len(run.created) and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            await asyncio.sleep(3.0)  # late double binds, if any, show up
            await pipeline.wait_processor_caught_up(timeout_s=max(60.0, deadline - time.monotonic()))
            stop.set()
            await asyncio.gather(*background)
            elapsed = time.monotonic() - started
            output = pipeline.processor_output(None)
            for component in ("processor", "binder", "connector"):
                forked = output.count(f"{component}: worker exited with")
                if forked > run.kills[component]:  # a supervisor forked a worker that died on its own
                    run.unplanned[component] += forked - run.kills[component]
            accepted = bindings.update()
            run.overcommitted += [f"at the end: {found}" for found in overcommitted(pipeline, args.gpus)]

            history = await read_broker(pipeline.kafka, pipeline.names, timeout_s=120)
            invariants = check_history(history)
            replayed = replay_history(history)
            letters = [DeadLetter.model_validate_json(r.value or b"")
                       for r in await read_topic(pipeline.kafka, pipeline.names.dead_letter, timeout_s=120)]

    lettered = {(d.partition, d.offset): d.reason for d in letters if d.topic == pipeline.names.cluster_events}
    unlettered = Counter(kind for at, kind in run.hostile_lettered.items() if not lettered.get(at))
    lost = [name for name in run.created if accepted[name] == 0]
    double = {name: n for name, n in accepted.items() if n > 1}
    partial = [gang for gang, members in run.gangs.items() if 0 < sum(accepted[m] > 0 for m in members) < GANG]
    print(f"\nchaos long form: engine {args.engine}, {args.nodes} nodes x {args.gpus} GPUs, {len(run.created)} pods "
          f"created ({len(run.gangs)} gangs of {GANG}), {elapsed:.0f} s, load average {os.getloadavg()[0]:.1f}")
    print(f"kills survived: {dict(run.kills)}; exits on their own (restarted): {dict(run.unplanned) or 0}")
    for component, values in run.recovery.items():
        print(f"  {component}: recovery p50 {statistics.median(values):.2f} s, max {max(values):.2f} s "
              f"{[round(v, 1) for v in values]} (target p50 <= 5 s)")
    sent = len(run.hostile_lettered) + sum(run.hostile_harmless.values())
    print(f"hostile records sent {sent}: {len(run.hostile_lettered)} to be dead-lettered, "
          f"{len(run.hostile_lettered) - sum(unlettered.values())} dead-lettered with a reason, "
          f"missing {dict(unlettered) or 0}; harmless replays {dict(run.hostile_harmless)}; "
          f"dead letters on the topic {len(letters)}")
    print(f"lost pods {len(lost)} {lost[:10]}; double binds {len(double)} {dict(list(double.items())[:10])}; "
          f"over-committed GPUs in {run.samples} samples: {len(run.overcommitted)} {run.overcommitted[:5]}; "
          f"partial gangs at the end {len(partial)} {partial[:10]}")
    print(f"audit invariants: {'intact' if invariants.ok else invariants.violation} "
          f"({invariants.records} records, {invariants.decisions} decisions)")
    print(f"replay: {replayed.identical} of {replayed.decisions} decisions identical, "
          f"{len(replayed.divergences)} divergences {replayed.errors[:3]}")
    broken = (lost or double or run.overcommitted or partial or unlettered or not invariants.ok
              or not replayed.ok or replayed.decisions == 0)
    print("RESULT:", "FAILED" if broken else "every promise held")
    return 1 if broken else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=800)
    parser.add_argument("--gpus", type=int, default=16, help="GPUs per node")
    parser.add_argument("--rate", type=float, default=40.0, help="pods created per second")
    parser.add_argument("--engine", choices=ENGINES, default="kafka")
    parser.add_argument("--kill-every", type=float, default=10.0, help="seconds between kills")
    parser.add_argument("--broker-kills", type=int, default=1, help="broker kills (Apache Kafka engine only)")
    parser.add_argument("--hostile", type=int, default=10_000, help="hostile records sent to cluster-events")
    parser.add_argument("--sample-every", type=float, default=2.0, help="seconds between over-commit samples")
    parser.add_argument("--supervise", action="store_true",
                        help="components run under kai_stream/prefork.py; kill -9 hits the worker, forked again")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for every pod at the end")
    return parser.parse_args(argv)


async def _main(args: argparse.Namespace) -> int:
    """``main``, cancelled (so every process it started is stopped) on SIGTERM."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await main(args)


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(parse())))
