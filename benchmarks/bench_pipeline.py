"""End-to-end pipeline latency and throughput: 1,000 nodes, 10,000 pods created through the API at a steady rate.

Everything real: embedded Tansu broker (TCP), simulated Kubernetes API (HTTP), Kubernetes connector,
faust scheduler processor (subprocess), binder. Prints:

* pod-created -> binding-POST latency p50 / p99 (server-side clock of the simulated API: when the pod was
  stored, when its binding POST arrived) — targets p50 <= 50 ms, p99 <= 250 ms;
* pipeline throughput: cluster-events records per second from the first pod created to the last binding;
* the same-run baseline: raw aiokafka consume throughput on the same broker (records of the same size),
  and the ratio pipeline / raw (target >= 0.5).

Usage: ``python benchmarks/bench_pipeline.py [--nodes 1000] [--pods 10000] [--rate 100]`` (rate in pods/s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from aiokafka import TopicPartition
from kubernetes_asyncio import client

from connectors.simcluster.client import api_client
from kai_stream.kafka import make_consumer, make_producer, read_topic
from kai_stream.pipeline import Pipeline, PipelineOptions
from kai_stream.topics import create_topics, load_specs

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


async def create_pods(url: str, count: int, rate: float) -> float:
    """Create ``count`` pods, one every 1/rate s (as fast as possible when rate <= 0); return the start time."""
    async with api_client(url) as api:
        core = client.CoreV1Api(api)
        slots = asyncio.Semaphore(64)
        started = time.perf_counter()

        async def one(i: int) -> None:
            async with slots:
                await core.create_namespaced_pod("bench", pod(i))

        tasks = []
        for i in range(count):
            if rate > 0:
                delay = started + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        return started


async def raw_consume(bootstrap: str, records: int, size: int) -> float:
    """Baseline: produce ``records`` of ``size`` bytes to a fresh 8-partition topic, time a plain consume."""
    from kai_stream.settings import KafkaSettings

    kafka = KafkaSettings(bootstrap_servers=bootstrap)
    topic = f"bench-raw-{int(time.time())}"
    spec = next(s for s in load_specs() if s.name == "cluster-events")
    await create_topics(kafka, [spec.model_copy(update={"name": topic})])
    producer = make_producer(kafka, linger_ms=5)
    await producer.start()
    payload = b"x" * size
    try:
        for start in range(0, records, 1000):
            chunk = range(start, min(records, start + 1000))
            futures = [await producer.send(topic, payload, partition=i % 8) for i in chunk]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()
    consumer = make_consumer(kafka, group_id=None, max_poll_records=10_000)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(8)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen = 0
        started = time.perf_counter()
        while seen < records:
            batches = await consumer.getmany(timeout_ms=200, max_records=10_000)
            seen += sum(len(b) for b in batches.values())
        return seen / (time.perf_counter() - started)
    finally:
        await consumer.stop()


async def main(nodes: int, pods: int, rate: float, gpus: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "cluster.yaml"
        scenario.write_text(cluster_yaml(nodes, gpus))
        options = PipelineOptions(scenario=scenario, tick_interval_s=1.0, tail=False)
        async with Pipeline(options) as pipeline:
            assert pipeline.cluster.url is not None and pipeline.kafka is not None
            await asyncio.sleep(6.0)  # processor up and caught up with the initial list
            before = len(await read_topic(pipeline.kafka, pipeline.names.cluster_events))
            print(f"{nodes} nodes x {gpus} GPUs, creating {pods} pods at {rate or 'max'} pods/s ...", flush=True)
            started = await create_pods(pipeline.cluster.url, pods, rate)
            created_s = time.perf_counter() - started
            deadline = time.monotonic() + 300
            while pipeline.cluster.binding_count < pods and time.monotonic() < deadline:
                failure = pipeline.failed()
                if failure:
                    raise RuntimeError(failure)
                await asyncio.sleep(0.2)
            bindings = [b for b in pipeline.cluster.bindings if b.latency is not None]
            end = max(b.at for b in bindings)
            elapsed = end - started
            events = len(await read_topic(pipeline.kafka, pipeline.names.cluster_events)) - before
            latencies = sorted(b.latency * 1000 for b in bindings if b.latency is not None)
            raw = await raw_consume(pipeline.kafka.bootstrap_servers, 200_000, 700)
        p50 = statistics.median(latencies)
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        pipeline_rate = events / elapsed
        print(f"pods created in {created_s:.1f}s; bound {len(bindings)}/{pods} in {elapsed:.1f}s")
        print(f"latency pod-created -> binding POST: p50 {p50:.1f} ms, p99 {p99:.1f} ms (targets 50 / 250 ms)")
        print(f"pipeline: {events} cluster-events in {elapsed:.1f}s = {pipeline_rate:,.0f} events/s, "
              f"{len(bindings) / elapsed:,.0f} pods bound/s")
        print(f"baseline raw aiokafka consume (same broker, same run): {raw:,.0f} records/s")
        print(f"ratio pipeline / raw: {pipeline_rate / raw:.3f} (target >= 0.5)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=100.0, help="pods created per second (0: as fast as possible)")
    parser.add_argument("--gpus", type=int, default=16, help="GPUs per node")
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.pods, args.rate, args.gpus))
