"""Chaos, short form (bounded to about a minute; the long form is benchmarks/bench_chaos.py): connector, processor
and binder run as separate processes on the embedded broker and the simulated cluster; while pods arrive in waves
they are each killed with SIGKILL three times and restarted, and hostile records (garbage bytes, negative GPUs, a
misrouted pool, a forged duplicate of a pod's Pending observation) are written to cluster-events. At the end:
every pod bound exactly once, no node over its GPUs (no device given twice), every hostile record dead-lettered
with a reason, and the recorded log replays identically. Prints kills, recovery times and records sent /
dead-lettered."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path

import orjson
from kubernetes_asyncio import client

from kai_stream.connectors.simcluster.client import api_client
from kai_stream.core.events import DeadLetter, PodObserved, loads_cluster_event
from kai_stream.core.manifests import ANNOTATION_GPU_INDICES
from kai_stream.history.reader import read_broker
from kai_stream.kafka import make_producer, partition_for, read_topic
from kai_stream.pipeline import Pipeline, PipelineOptions
from kai_stream.replay.testing import assert_replays_identically
from tests.cluster_objects import create_pod, gpu_nodes, gpu_pod, unlimited_queue, until

NODES, GPUS_PER_NODE, WAVES, PODS_PER_WAVE = 6, 4, 3, 5  # 22 GPUs asked of 24: every pod fits
CLUSTER = gpu_nodes(NODES, GPUS_PER_NODE) + "---\n" + unlimited_queue("q")


def _hostile(pool_partition: int, partitions: int, forged: bytes) -> list[tuple[int, bytes]]:
    other = next(f"p{i}" for i in range(100) if partition_for(f"p{i}", partitions) != pool_partition)
    negative = orjson.loads(forged)
    negative["event_id"] = "chaos-negative"
    negative["pod"]["requests"]["gpu_milli"] = -8000
    misrouted = {"type": "Tick", "event_id": "chaos-misrouted", "ts": 1.0, "pool": other}
    return [
        (pool_partition, b"\x00\xff garbage \xfe" * 50),
        (pool_partition, b"{" * 5000),
        (pool_partition, orjson.dumps(negative)),
        (pool_partition, orjson.dumps(misrouted)),
        (pool_partition, b'{"type":"Tick","event_id":"chaos-inf","ts":1e999}'),
        (pool_partition, forged),  # a re-sent (forged duplicate) Pending observation of a pod bound since
    ]


async def test_kills_and_hostile_records_lose_nothing_and_overcommit_nothing(
    broker: str, topic_prefix: str, tmp_path: Path
) -> None:
    scenario = tmp_path / "cluster.yaml"
    scenario.write_text(CLUSTER)
    options = PipelineOptions(
        scenario=scenario, bootstrap_servers=broker, topic_prefix=topic_prefix, tick_interval_s=0.5,
        binder_subprocess=True, connector_subprocess=True,
    )
    names: list[str] = []
    recoveries: dict[str, list[float]] = defaultdict(list)
    kills = Counter[str]()
    sent_hostile = 0
    async with Pipeline(options) as pipeline, api_client(pipeline.cluster.url or "") as api:
        core = client.CoreV1Api(api)
        assert pipeline.kafka is not None

        def bound() -> set[str]:
            return {b.name for b in pipeline.cluster.bindings if b.code == 201}

        for wave in range(WAVES):
            batch = [f"w{wave}-{i}" for i in range(PODS_PER_WAVE)]
            names += batch
            for i, name in enumerate(batch):
                await create_pod(core, "chaos", gpu_pod(name, "chaos", 1 + (i + wave) % 2, queue="q"))
                if i == 1:
                    pipeline.stop_processor(kill=True)
                    kills["processor"] += 1
                    started = time.monotonic()
                    pipeline.start_processor()
                if i == 2:
                    await pipeline.stop_connector(kill=True)
                    kills["connector"] += 1
                    pipeline.start_connector()
                if i == 3:
                    await pipeline.stop_binder(kill=True)
                    kills["binder"] += 1
                    pipeline.start_binder()

            def batch_bound(want: frozenset[str] = frozenset(batch)) -> bool:
                return bound() >= want

            await until(batch_bound, f"wave {wave} bound", pipeline, 45.0, 0.05)
            recoveries["all three"].append(time.monotonic() - started)
            if wave == 0:
                events = await read_topic(pipeline.kafka, pipeline.names.cluster_events)
                pending = next(
                    r for r in events
                    if isinstance(e := loads_cluster_event(r.value or b""), PodObserved)
                    and e.pod.name == batch[0] and e.pod.node_name is None
                )
                producer = make_producer(pipeline.kafka)
                await producer.start()
                try:
                    for partition, value in _hostile(pending.partition, len(await producer.partitions_for(
                            pipeline.names.cluster_events)), pending.value or b""):
                        await producer.send_and_wait(pipeline.names.cluster_events, value, partition=partition)
                        sent_hostile += 1
                finally:
                    await producer.stop()
        await pipeline.wait_caught_up(timeout_s=60)

        posts = Counter(b.name for b in pipeline.cluster.bindings if b.code == 201)
        assert set(posts) == set(names) and set(posts.values()) == {1}, posts
        used: dict[str, list[int]] = defaultdict(list)
        for pod in pipeline.cluster.objects("Pod", "chaos"):
            node = pod["spec"].get("nodeName")
            indices = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_GPU_INDICES, "")
            assert node is not None
            used[node] += [int(i) for i in indices.split(",") if i]
        for node, devices in used.items():
            assert len(devices) == len(set(devices)) <= GPUS_PER_NODE, (node, devices)

        letters = [DeadLetter.model_validate_json(r.value or b"")
                   for r in await read_topic(pipeline.kafka, pipeline.names.dead_letter)]
        # every hostile record but the forged duplicate (folded as a no-op) is dead-lettered with a reason
        assert len(letters) == sent_hostile - 1, pipeline.processor_output()[-4000:]
        assert all(letter.reason for letter in letters)

        history = await read_broker(pipeline.kafka, pipeline.names)
        report = assert_replays_identically(history)
        print(
            f"\nchaos: kills {dict(kills)}, pods {len(names)} bound once, hostile sent {sent_hostile}, "
            f"dead-lettered {len(letters)}, wave recovery s {[round(r, 2) for r in recoveries['all three']]}, "
            f"replayed {report.identical} decisions identically"
        )
