"""Processor restart at scale: how long a SIGKILLed processor takes to decide again, resuming from its engine
snapshot (Apache Kafka) against folding both logs from offset 0 (the baseline, measured in the same run).

cluster-events gets ``--nodes`` nodes, four queues and ``--pods`` one-GPU pods (the observations the connector
would publish, written straight to the topic: no API server or binder, so only the processor is measured). A
processor (``python -m kai_stream.streams``, a subprocess as in production) decides them all and is left running
until its snapshot is committed. Then, per mode: SIGKILL, one new pod observed, start a new processor; the figure is
from that start to the producer timestamp of the new pod's decision on the decisions topic (target <= 5 s at 10,000
pods), and the CPU seconds the new processor had used by then (imports and faust's start included): on a loaded
machine the wall time is mostly waiting for a core. Each restart's phases follow: the processor's start milestones
(``kai_stream/streams/startup.py``: imported, faust's group assigned, the app's tasks started, consumer started,
partitions assigned, first records fetched, producer fenced, snapshot read, logs read, rebuilt, first batch
committed), each as seconds after the start and the CPU seconds by then. The snapshot mode runs only on Kafka (Tansu
has no transactions; its processor always folds from 0).

Usage: ``python benchmarks/bench_restart.py [--engine kafka|tansu] [--nodes 1000] [--pods 10000]
[--bootstrap-servers HOST:PORT] [--log FILE] [--repeat 1] [--long-timeouts]``: ``--repeat`` restarts per mode,
alternating the modes, then each mode's min and median.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import yaml
from bench_pipeline import cluster_yaml, pod, process_cpu_s

from kai_stream.core.events import ObservedEvent, PodObserved, dumps, loads_decisions_record
from kai_stream.core.manifests import load_scenario
from kai_stream.engines import ENGINES, Engine, embedded_broker
from kai_stream.kafka import assign_from_start, make_consumer, make_producer, partition_for
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames, create_topics, load_specs


@asynccontextmanager
async def broker(engine: Engine, servers: str | None) -> AsyncIterator[str]:
    if servers:
        yield servers
        return
    embedded = embedded_broker(engine)
    embedded.start()
    try:
        yield embedded.bootstrap_servers
    finally:
        embedded.stop()


async def publish(kafka: KafkaSettings, topic: str, events: list[ObservedEvent]) -> None:
    partitions = {spec.name: spec.partitions for spec in load_specs()}["cluster-events"]
    producer = make_producer(kafka, linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, dumps(e), key=e.pool.encode(), partition=partition_for(e.pool, partitions))
            for e in events
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


class Decisions:
    """Follows the decisions topic: first decision time (producer timestamp, s) per pod name."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self.kafka, self.topic = kafka, topic
        self.at: dict[str, float] = {}

    async def follow(self) -> None:
        consumer = make_consumer(self.kafka, group_id=None, fetch_max_wait_ms=10)
        await consumer.start()
        try:
            await assign_from_start(consumer, self.topic)
            while True:
                for records in (await consumer.getmany(timeout_ms=100, max_records=10_000)).values():
                    for record in records:
                        name = getattr(loads_decisions_record(record.value or b""), "name", None)
                        if name is not None:
                            self.at.setdefault(name, record.timestamp / 1000)
        finally:
            await consumer.stop()

    async def wait_for(self, names: set[str], timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while not names <= self.at.keys():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(names - self.at.keys())} pods not decided in {timeout_s}s")
            await asyncio.sleep(0.02)
        return max(self.at[n] for n in names)


_MILESTONE = re.compile(r"\[(\d+)\] \[INFO\] processor start: (.+) at (\d+\.\d+) \(cpu (\d+\.\d+)s\)")


def phases(log: str, pid: int, started: float, decided: float) -> str:
    """Where a restarted processor's time went: each start milestone it logged (``streams/startup.py``) as seconds
    after its start and its CPU seconds by then, then its decision."""
    split = [
        f"{name} +{float(at) - started:.2f}s (cpu {cpu}s)"
        for found_pid, name, at, cpu in _MILESTONE.findall(log)
        if int(found_pid) == pid
    ]
    return ", ".join([*split, f"decided +{decided - started:.2f}s"])


def start_processor(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "kai_stream.streams"], env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )


async def main(
    engine: Engine,
    nodes: int,
    pods: int,
    servers: str | None,
    keep_log: Path | None = None,
    repeat: int = 1,
    first_start_timeouts: bool = False,
) -> None:
    modes = [("snapshot", "5.0"), ("offset 0", "0")] if engine == "kafka" else [("offset 0", "0")]
    restarts = repeat * len(modes)
    docs = list(yaml.safe_load_all(cluster_yaml(nodes, 16))) + [pod(i) for i in range(pods + restarts)]
    events = load_scenario(yaml.safe_dump_all(docs))
    late: dict[str, list[ObservedEvent]] = {pod(pods + i)["metadata"]["name"]: [] for i in range(restarts)}
    initial: list[ObservedEvent] = []
    for event in events:
        if isinstance(event, PodObserved) and event.pod.name in late:
            late[event.pod.name].append(event)
        else:
            initial.append(event)
    prefix = f"restart{uuid.uuid4().hex[:8]}-"
    names = TopicNames.with_prefix(prefix)
    with tempfile.TemporaryDirectory() as tmp:
        async with broker(engine, servers) as bootstrap:
            kafka = KafkaSettings(bootstrap_servers=bootstrap)
            await create_topics(kafka, names=names)
            started = time.perf_counter()
            await publish(kafka, names.cluster_events, initial)
            print(f"engine {engine}; {nodes} nodes, {pods} pods: {len(initial)} cluster-events records written in "
                  f"{time.perf_counter() - started:.1f}s; load average {os.getloadavg()[0]:.1f}", flush=True)
            env = {
                **os.environ,
                "KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                "KAI_STREAM_PROCESSOR_APP_ID": f"{prefix}kai-stream-scheduler",
                "KAI_STREAM_PROCESSOR_TOPIC_PREFIX": prefix,
                "KAI_STREAM_PROCESSOR_DATA_DIR": str(Path(tmp) / "faust"),
                "KAI_STREAM_PROCESSOR_INSTANCE_ID": f"{prefix}processor",
                "KAI_STREAM_PROCESSOR_PARENT_PID": str(os.getpid()),
                "KAI_STREAM_HEALTH_ENABLED": "false",
                "KAI_STREAM_PROCESSOR_LOG_LEVEL": "INFO",
            }
            # as in the image, whose install compiled the package's bytecode: with it unset the first processor writes
            # what the restarts read (set, every start compiled each kai_stream module from its source again)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            if first_start_timeouts:  # a loaded machine's first 10,000-pod cycle outlasts the defaults (6 s, 10 s)
                env.setdefault("KAI_STREAM_KAFKA_SESSION_TIMEOUT_MS", "30000")
                env.setdefault("KAI_STREAM_PROCESSOR_TRANSACTION_TIMEOUT_MS", "60000")
            log = keep_log or Path(tmp) / "processor.log"
            decisions = Decisions(kafka, names.decisions)
            follower = asyncio.create_task(decisions.follow())
            proc = start_processor(env, log)
            try:
                first = time.time()
                all_pods = {pod(i)["metadata"]["name"] for i in range(pods)}
                decided = await decisions.wait_for(all_pods, 900)
                print(f"first start: every pod decided {decided - first:.1f}s after the processor started")
                await asyncio.sleep(3.0)  # its snapshot (taken with the first batch) is committed by now
                figures: dict[str, list[tuple[float, float]]] = {mode: [] for mode, _ in modes}
                for (mode, interval), (name, observed) in zip(modes * repeat, late.items(), strict=True):
                    proc.kill()
                    proc.wait()
                    await publish(kafka, names.cluster_events, observed)
                    env["KAI_STREAM_PROCESSOR_SNAPSHOT_INTERVAL_S"] = interval
                    restarted = time.time()
                    proc = start_processor(env, log)
                    decided_at = await decisions.wait_for({name}, 300)
                    cpu = process_cpu_s(proc.pid)
                    figures[mode].append((decided_at - restarted, cpu))
                    print(f"restart (SIGKILL, one new pod) back to deciding, from {mode}: "
                          f"{decided_at - restarted:.2f}s (target <= 5 s); the new processor's CPU by then {cpu:.2f}s",
                          flush=True)
                    await asyncio.sleep(0.5)  # its log lines are flushed
                    print(f"  phases: {phases(log.read_text(errors='replace'), proc.pid, restarted, decided_at)}")
                for mode, runs in figures.items():
                    walls, cpus = sorted(w for w, _ in runs), sorted(c for _, c in runs)
                    print(f"from {mode}, {len(runs)} restarts: wall min {walls[0]:.2f}s median "
                          f"{statistics.median(walls):.2f}s; CPU min {cpus[0]:.2f}s median "
                          f"{statistics.median(cpus):.2f}s")
                rebuilt = [line for line in log.read_text(errors="replace").splitlines() if "rebuilt partition" in line]
                print("\n".join(rebuilt[-4:]))
            finally:
                proc.kill()
                proc.wait()
                follower.cancel()
            print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=ENGINES, default="kafka")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--bootstrap-servers", help="a running broker of --engine")
    parser.add_argument("--log", type=Path, help="keep the processors' log in this file")
    parser.add_argument("--repeat", type=int, default=1, help="restarts per mode (one new pod each)")
    parser.add_argument(
        "--long-timeouts",
        action="store_true",
        help="session 30 s, transaction 60 s: on a loaded machine the first start's cycle over every pod blocks the "
        "processor's loop past the defaults, and its group session and transaction expire (the restarts, static "
        "members that fence their predecessor, wait for neither)",
    )
    args = parser.parse_args()
    asyncio.run(
        main(args.engine, args.nodes, args.pods, args.bootstrap_servers, args.log, args.repeat, args.long_timeouts)
    )
