"""A restarted connector's first publication does not wait for the cluster's size: what changed while it was away
goes out before the pods it finds unchanged (by resourceVersion) are translated again, and that background pass
still corrects a log whose last word on an unchanged pod is not what the pod translates to."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from kubernetes_asyncio import client

from kai_stream import prefork
from kai_stream.connectors.kubernetes import KubernetesConnector
from kai_stream.connectors.kubernetes.catalog import Catalog
from kai_stream.connectors.kubernetes.watcher import Obj
from kai_stream.connectors.simcluster import SimCluster
from kai_stream.connectors.simcluster.client import api_client
from kai_stream.core.events import PodObserved, content_digest, dumps, loads_cluster_event
from kai_stream.kafka import make_producer, read_topic, send_keyed
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames
from tests.connectors.running import running

PODS = 150
QUEUE_AND_NODE = """
apiVersion: v1
kind: Node
metadata: {name: gpu-1}
status: {allocatable: {nvidia.com/gpu: "8", cpu: "8", memory: 64Gi}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: q}
spec: {resources: {gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}}
"""


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": {"kai.scheduler/queue": "q"}},
        "spec": {"schedulerName": "kai-scheduler",
                 "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    async with SimCluster(bookmark_interval=0.2) as sim:
        sim.load_objects([*yaml.safe_load_all(QUEUE_AND_NODE), *(_pod(f"p{i:03d}") for i in range(PODS))])
        yield sim


class Recorded(KubernetesConnector):
    """A connector that notes the name of every pod it translates, in order."""

    translated: list[str]

    async def _translate(self, obj: Obj) -> Any:
        if obj.get("kind") == "Pod":
            self.translated.append(str(obj["metadata"]["name"]))
        return await super()._translate(obj)


async def _pods_published(kafka: KafkaSettings, topics: TopicNames) -> list[PodObserved]:
    events = [loads_cluster_event(r.value or b"") for r in await read_topic(kafka, topics.cluster_events)]
    return [e for e in events if isinstance(e, PodObserved)]


async def _until_translated(connector: Recorded, pods: int, timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while len(set(connector.translated)) < pods:
            await asyncio.sleep(0.05)
    await connector.flush()


async def test_a_restart_publishes_a_new_pod_before_translating_the_unchanged_ones(
    cluster: SimCluster, kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    async with api_client(cluster.url or "") as api:
        first = KubernetesConnector(api, kafka_settings, topics, tick_interval_s=None)
        async with running(first, synced_within_s=30):
            await first.flush()
        assert len(await _pods_published(kafka_settings, topics)) == PODS
        await cluster.create(_pod("z-new"))  # while no connector runs; listed after every other pod

        restarted = Recorded(api, kafka_settings, topics, tick_interval_s=None)
        restarted.translated = []
        async with running(restarted, synced_within_s=30):
            await _until_translated(restarted, PODS + 1)
        assert restarted.translated[0] == "z-new", restarted.translated[:5]
        assert sorted(restarted.translated[1:]) == [f"p{i:03d}" for i in range(PODS)], "not translated again"
        published = await _pods_published(kafka_settings, topics)
        assert [e.pod.name for e in published[PODS:]] == ["z-new"], "an unchanged pod was published again"


async def test_the_background_pass_corrects_a_stale_last_word_at_the_current_version(
    cluster: SimCluster, kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    async with api_client(cluster.url or "") as api:
        first = KubernetesConnector(api, kafka_settings, topics, tick_interval_s=None)
        async with running(first, synced_within_s=30):
            await first.flush()
        true = next(e for e in await _pods_published(kafka_settings, topics) if e.pod.name == "p007")
        body = orjson.loads(dumps(true))
        body["event_id"] = "forged-p007"
        body["pod"]["labels"] = {"kai.scheduler/queue": "q", "forged": "yes"}
        producer = make_producer(kafka_settings)
        await producer.start()
        try:
            await (await send_keyed(producer, topics.cluster_events, true.pool, orjson.dumps(body)))
        finally:
            await producer.stop()

        restarted = Recorded(api, kafka_settings, topics, tick_interval_s=None)
        restarted.translated = []
        async with running(restarted, synced_within_s=30):
            await _until_translated(restarted, PODS)
        last = [e for e in await _pods_published(kafka_settings, topics) if e.pod.name == "p007"][-1]
        assert last.event_id != "forged-p007" and content_digest(last) == content_digest(true)


async def test_a_supervised_successor_reads_only_the_log_after_its_predecessors_catalog(
    cluster: SimCluster, kafka_settings: KafkaSettings, topics: TopicNames, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prefork, "state_dir", str(tmp_path))
    folded: list[str] = []
    record = Catalog.record

    def counted(catalog: Catalog, event: Any) -> None:
        folded.append(event.type)
        record(catalog, event)

    monkeypatch.setattr(Catalog, "record", counted)
    async with api_client(cluster.url or "") as api:
        for _ in range(2):  # the first publishes the cluster, the second saves the catalog it read back
            connector = KubernetesConnector(api, kafka_settings, topics, tick_interval_s=None)
            async with running(connector, synced_within_s=30):
                await connector.flush()
            assert list(tmp_path.glob("catalog-*.json")), "no catalog saved for the successor"
        await cluster.create(_pod("z-new"))
        core = client.CoreV1Api(api)
        await core.delete_namespaced_pod("p003", "ns")
        folded.clear()
        successor = Recorded(api, kafka_settings, topics, tick_interval_s=None)
        successor.translated = []
        async with running(successor, synced_within_s=30):
            await _until_translated(successor, PODS)
        assert len([t for t in folded if t != "PodObserved"]) <= 1 and folded.count("PodObserved") <= 1, folded
        assert successor.published == 2, successor.published
        events = [loads_cluster_event(r.value or b"") for r in await read_topic(kafka_settings, topics.cluster_events)]
        published = {(e.type, e.pod.name if isinstance(e, PodObserved) else getattr(e, "name", "")) for e in events}
        assert {("PodObserved", "z-new"), ("PodRemoved", "p003")} <= published
