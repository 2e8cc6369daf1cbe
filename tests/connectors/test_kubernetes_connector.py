"""The Kubernetes connector against the simulated API (HTTP, kubernetes-asyncio) and the real broker (TCP)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from kai_stream.connectors.kubernetes import KINDS, KubernetesConnector
from kai_stream.connectors.kubernetes.kinds import KIND_BY_NAME, ListCall
from kai_stream.connectors.kubernetes.watcher import Expired, Obj, follow, list_objects, watch_objects
from kai_stream.connectors.simcluster import SimCluster
from kai_stream.connectors.simcluster.client import api_client
from kai_stream.core.events import ALL_POOLS, DeadLetter, loads_cluster_event
from kai_stream.kafka import partition_for, read_topic
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames
from tests.cluster_objects import create_pod
from tests.connectors.running import running
from tests.kube_calls import send

CLUSTER = """
apiVersion: v1
kind: Node
metadata: {name: gpu-1, labels: {kai.scheduler/node-pool: blue}}
status: {allocatable: {nvidia.com/gpu: "4", cpu: "8", memory: 64Gi}}
---
apiVersion: v1
kind: Node
metadata: {name: gpu-2}
status: {allocatable: {nvidia.com/gpu: "4", cpu: "8", memory: 64Gi}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: q}
spec: {resources: {gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}}
"""


def _pod(name: str, gpus: str = "1", pool: str | None = None) -> dict[str, Any]:
    labels = {"kai.scheduler/queue": "q", **({"kai.scheduler/node-pool": pool} if pool else {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
        },
    }


def _name(event: Any) -> str:
    pod = getattr(event, "pod", None)
    return str(pod.name if pod is not None else getattr(event, "name", ""))


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    sim = SimCluster(bookmark_interval=0.2)
    await sim.start()
    sim.load_objects(list(yaml.safe_load_all(CLUSTER)))
    try:
        yield sim
    finally:
        await sim.stop()


async def _events(kafka: KafkaSettings, topics: TopicNames) -> list[tuple[int, Any]]:
    return [
        (r.partition, loads_cluster_event(r.value or b"")) for r in await read_topic(kafka, topics.cluster_events)
    ]


async def _until(check: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def test_publishes_by_pool_follows_changes_and_resumes_without_duplicates(
    cluster: SimCluster, kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    blue, default = partition_for("blue", 8), partition_for("default", 8)
    async with api_client(cluster.url or "") as api:
        core = client.CoreV1Api(api)
        await create_pod(core, "ns", _pod("keep", pool="blue"))
        await create_pod(core, "ns", _pod("gone"))
        connector = KubernetesConnector(api, kafka_settings, topics, tick_interval_s=None)
        async with running(connector):
            await connector.flush()
            events = await _events(kafka_settings, topics)
            nodes = {(p, e.node.name) for p, e in events if e.type == "NodeObserved"}
            assert nodes == {(blue, "gpu-1"), (default, "gpu-2")}
            assert sorted(p for p, e in events if e.type == "QueueObserved") == list(range(8))
            assert all(e.pool == ALL_POOLS for _, e in events if e.type == "QueueObserved")
            pods = {(p, e.pod.name) for p, e in events if e.type == "PodObserved"}
            assert pods == {(blue, "keep"), (default, "gone")}

            await create_pod(core, "ns", _pod("late"))
            await core.delete_namespaced_pod("gone", "ns")

            async def watched() -> bool:
                got = await _events(kafka_settings, topics)
                names = {(e.type, _name(e)) for _, e in got}
                return ("PodObserved", "late") in names and ("PodRemoved", "gone") in names

            await _until(watched)

        # while the connector is down: one pod deleted, one created
        await core.delete_namespaced_pod("late", "ns")
        await create_pod(core, "ns", _pod("meanwhile", pool="blue"))
        earlier = await _events(kafka_settings, topics)
        before = Counter(e.type for _, e in earlier)

        restarted = KubernetesConnector(api, kafka_settings, topics, tick_interval_s=None)
        async with running(restarted):
            await restarted.flush()
            after = await _events(kafka_settings, topics)
        counts = Counter(e.type for _, e in after)
        assert counts["NodeObserved"] == before["NodeObserved"] == 2
        assert counts["QueueObserved"] == before["QueueObserved"] == 8
        new = Counter((p, e.event_id) for p, e in after) - Counter((p, e.event_id) for p, e in earlier)
        published = [(p, e) for p, e in after if (p, e.event_id) in new]
        assert sorted((p, e.type, _name(e)) for p, e in published) == sorted(
            [(blue, "PodObserved", "meanwhile"), (default, "PodRemoved", "late")]
        )


async def test_ticks_and_dead_letters(cluster: SimCluster, kafka_settings: KafkaSettings, topics: TopicNames) -> None:
    async with api_client(cluster.url or "") as api:
        await create_pod(client.CoreV1Api(api), "ns", _pod("half", gpus="1.5"))
        connector = KubernetesConnector(api, kafka_settings, topics, tick_interval_s=0.2, clock=lambda: 42.0)
        async with running(connector):

            async def ticked() -> list[Any]:
                return [(p, e) for p, e in await _events(kafka_settings, topics) if e.type == "Tick"]

            ticks = await _until(ticked)
        assert {e.pool for _, e in ticks} <= {"blue", "default"}
        assert all(e.ts == 42.0 for _, e in ticks)
        records = await read_topic(kafka_settings, topics.dead_letter)
        letters = [DeadLetter.model_validate_json(r.value or b"") for r in records]
        assert len(letters) == 1
        assert "half" in (letters[0].value_text or "") and "nvidia.com/gpu" in letters[0].reason


@contextlib.asynccontextmanager
async def _compacted() -> AsyncIterator[tuple[ListCall, client.CoreV1Api, str]]:
    """A simulated cluster keeping 3 changes, its pods' list call, and a version that 6 pod creations compacted."""
    sim = SimCluster(history_limit=3)
    await sim.start()
    try:
        sim.load_objects(list(yaml.safe_load_all(CLUSTER)))
        async with api_client(sim.url or "") as api:
            call = KIND_BY_NAME["Pod"].list_call(api)
            _, stale = await list_objects(KIND_BY_NAME["Pod"], call)
            core = client.CoreV1Api(api)
            for i in range(6):
                await create_pod(core, "ns", _pod(f"p{i}"))
            yield call, core, stale
    finally:
        await sim.stop()


async def test_watch_from_an_expired_version_raises_expired() -> None:
    async with _compacted() as (call, _, version):
        with pytest.raises(Expired):
            async for _ in watch_objects(KIND_BY_NAME["Pod"], call, version, timeout_s=2):
                pass
    assert {k.kind for k in KINDS} == {
        "Node", "Pod", "Queue", "PodGroup", "PriorityClass", "Topology",
        "DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice",
    }


async def test_follow_relists_after_an_expired_version_and_then_delivers_changes() -> None:
    """The connector's and the binder's one list-then-watch loop: a watch from a compacted version (410) makes it
    list again at once, and the changes after that list reach ``changed`` with their resourceVersion."""
    pods = KIND_BY_NAME["Pod"]
    async with _compacted() as (call, core, stale):
        stale_left = [stale]
        listed: list[list[str]] = []
        seen: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()

        async def relist() -> str:
            if stale_left:
                return stale_left.pop()
            items, version = await list_objects(pods, call)
            listed.append(sorted(item["metadata"]["name"] for item in items))
            return version

        async def changed(change: str, obj: Obj, version: str) -> None:
            await seen.put((change, obj["metadata"]["name"], version))

        task = asyncio.create_task(follow(pods, call, relist=relist, changed=changed, timeout_s=2, who="test"))
        try:
            deadline = time.monotonic() + 10
            while not listed and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert listed == [[f"p{i}" for i in range(6)]]
            created = await create_pod(core, "ns", _pod("late"))
            change, name, version = await asyncio.wait_for(seen.get(), 10)
            assert (change, name) == ("ADDED", "late")
            assert version == created.metadata.resource_version
            assert seen.empty() and len(listed) == 1
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_status_writes_and_relists_of_unchanged_objects_publish_nothing(
    cluster: SimCluster, kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    merge = "application/merge-patch+json"
    cluster.load_objects([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": "high"}, "value": 100}])
    async with api_client(cluster.url or "") as api:
        core = client.CoreV1Api(api)
        crd = client.CustomObjectsApi(api)
        scheduling = client.SchedulingV1Api(api)
        await create_pod(core, "ns", _pod("p"))
        connector = KubernetesConnector(api, kafka_settings, topics, tick_interval_s=None)
        async with running(connector):
            await connector.flush()
            synced = connector.published
            assert Counter(e.type for _, e in await _events(kafka_settings, topics))["PriorityClassObserved"] == 8
            for beat in range(3):
                stamp = f"2026-01-01T00:00:0{beat}Z"
                ready = {"type": "Ready", "status": "True", "lastHeartbeatTime": stamp}
                await core.patch_node_status("gpu-2", {"status": {"conditions": [ready]}})
                await send(
                    crd.patch_cluster_custom_object_status,
                    "scheduling.run.ai", "v2", "queues", "q", {"status": {"allocated": {"gpu": beat}}},
                    _content_type=merge)
                await scheduling.patch_priority_class("high", {"metadata": {"annotations": {"beat": str(beat)}}})
                await core.patch_namespaced_pod_status(
                    "p", "ns", {"status": {"conditions": [{"type": "Probe", "status": "True", "reason": stamp}]}})
            await cluster.wait_until(lambda: cluster.get("nodes", None, "gpu-2")["status"]["conditions"])
            await asyncio.sleep(1.0)
            for kind in KINDS:
                await connector._relist(kind)
            await connector.flush()
            assert connector.published == synced, "unchanged objects were published again"

            await send(
                crd.patch_cluster_custom_object,
                "scheduling.run.ai", "v2", "queues", "q", {"spec": {"priority": 7}}, _content_type=merge)
            await scheduling.delete_priority_class("high")
            await asyncio.sleep(0.5)
            await send(
                scheduling.create_priority_class,
                {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"},
                 "value": 100})

            async def changed() -> bool:
                counts = Counter(e.type for _, e in await _events(kafka_settings, topics))
                return counts["QueueObserved"] == 16 and counts["PriorityClassObserved"] == 16

            await _until(changed)
