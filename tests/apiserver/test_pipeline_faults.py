"""The pipeline on a real kube-apiserver under faults: the connector and the binder run as ``kai-stream`` processes
(authenticated with the chart's ServiceAccount tokens) and are SIGKILLed and restarted mid-run; reclaim evicts
through the eviction API and KWOK honours the victims' termination grace. ``kai-stream audit invariants`` then
reads the whole log back from the broker and must find every promise kept."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_asyncio import client, watch

from kai_stream.connectors.apiserver import ControlPlane
from kai_stream.core.events import BindFailed, BindRequested, EvictionRequested, PodPipelined
from kai_stream.pipeline import Pipeline, PipelineOptions
from tests.kube_calls import send

from .conftest import remove_test_objects
from .test_pipeline_e2e import _pod, _setup_cluster

pytestmark = pytest.mark.apiserver

GRACE_S = 4


def _options(plane: ControlPlane, broker: str, prefix: str) -> PipelineOptions:
    return PipelineOptions(
        bootstrap_servers=broker, topic_prefix=prefix, tick_interval_s=0.5,
        kubeconfig=plane.service_account_kubeconfig("connector"),
        binder_kubeconfig=plane.service_account_kubeconfig("binder"),
        connector_subprocess=True, binder_subprocess=True,
    )


async def _until(check: Callable[[], Any], what: str, pipeline: Pipeline, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert pipeline.failed() is None, pipeline.failed()
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{pipeline.processor_output()}"
        await asyncio.sleep(0.2)


def _audit(broker: str, prefix: str) -> dict[str, Any]:
    """``kai-stream audit invariants --json`` over the run's whole log, read from the broker."""
    result = subprocess.run(
        [sys.executable, "-c", "from kai_stream.cli import main; main()", "audit", "invariants",
         "--bootstrap-servers", broker, "--topic-prefix", prefix, "--json"],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode in (0, 1), result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["ok"] == (result.returncode == 0)
    return report


async def test_connector_and_binder_killed_mid_run_lose_nothing_and_bind_nothing_twice(
    control_plane: ControlPlane, admin: client.ApiClient, broker: str, topic_prefix: str
) -> None:
    """Two 4-GPU nodes, eight one-GPU pods in three waves (exactly full) and one 8-GPU pod that never fits. Wave 2
    is decided while the binder is dead; wave 3 is created while the connector is dead too; each comes back with
    its state from the API and the log: every pod is bound once, by one decision, and the pod that cannot fit
    carries the autoscaler's PodScheduled=False/Unschedulable."""
    namespace, queue, nodes = await _setup_cluster(admin, uuid.uuid4().hex[:6], nodes=2)
    v1 = client.CoreV1Api(admin)

    async def create(names: list[str], gpus: int = 1) -> None:
        for name in names:
            await send(v1.create_namespaced_pod, namespace, _pod(name, namespace, queue, gpus))

    async def bound(names: list[str]) -> bool:
        pods = {p.metadata.name: p for p in (await v1.list_namespaced_pod(namespace)).items}
        return all(n in pods and pods[n].spec.node_name for n in names)

    wave1, wave2, wave3 = ["w1-0", "w1-1", "w1-2"], ["w2-0", "w2-1", "w2-2"], ["w3-0", "w3-1"]
    try:
        async with Pipeline(_options(control_plane, broker, topic_prefix)) as pipeline:
            assert pipeline.tail is not None
            tail = pipeline.tail

            def decided(names: list[str]) -> Callable[[], Any]:
                async def check() -> bool:
                    return {d.name for d in tail.all_decisions() if isinstance(d, BindRequested)} >= set(names)
                return check

            await create(wave1)
            await create(["too-big"], gpus=8)
            await _until(lambda: bound(wave1), "wave 1 bound", pipeline)

            await pipeline.stop_binder(kill=True)
            await create(wave2)
            await _until(decided(wave2), "wave 2 decided while the binder is dead", pipeline)
            assert not await bound(wave2[:1])
            await pipeline.stop_connector(kill=True)
            await create(wave3)
            pipeline.start_binder()
            await _until(lambda: bound(wave2), "wave 2 bound by the restarted binder", pipeline)
            await asyncio.sleep(2)
            assert not {d.name for d in tail.all_decisions()} & set(wave3), "decided without a connector"

            pipeline.start_connector()
            await _until(lambda: bound(wave3), "wave 3 bound after the connector's restart", pipeline)
            await pipeline.wait_caught_up(timeout_s=60)

            async def marked() -> bool:
                pod = await v1.read_namespaced_pod("too-big", namespace)
                return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
                           for c in pod.status.conditions or [])

            await _until(marked, "the autoscaler's PodScheduled=False on the pod that cannot fit", pipeline)
            decisions = tail.all_decisions()
            outcomes = [e for part in tail.events.values() for _, e in part]

        pods = {p.metadata.name: p for p in (await v1.list_namespaced_pod(namespace)).items}
        everyone = wave1 + wave2 + wave3
        assert pods["too-big"].spec.node_name is None
        used: Counter[str] = Counter(pods[n].spec.node_name for n in everyone)
        assert set(used) <= set(nodes) and all(count <= 4 for count in used.values()), used
        binds = Counter(d.name for d in decisions if isinstance(d, BindRequested))
        assert binds == Counter(everyone), binds
        assert not [e for e in outcomes if isinstance(e, BindFailed)]
        report = _audit(broker, topic_prefix)
        assert report["ok"], report.get("violation")
        assert report["pods"] == {"bound": len(everyone), "pending": 1}, report["pods"]
    finally:
        await remove_test_objects(admin, namespace, f"{namespace}-")


class PodWatch:
    """Watches the namespace's pods as the admin: at every event checks each node's GPUs against its pods that
    are not Succeeded or Failed (terminating pods hold theirs); keeps when each pod was first seen bound, when
    it was deleted, and the most pods terminating at once."""

    def __init__(self, api: client.ApiClient, namespace: str, capacity: dict[str, int]) -> None:
        self.api, self.namespace, self.capacity = api, namespace, capacity
        self.pods: dict[str, dict[str, Any]] = {}
        self.bound_at: dict[str, float] = {}
        self.terminating_at: dict[str, float] = {}
        self.deleted_at: dict[str, float] = {}
        self.peak_terminating = 0
        self.violation: str | None = None

    async def run(self) -> None:
        v1 = client.CoreV1Api(self.api)
        async with watch.Watch() as stream:
            async for event in stream.stream(v1.list_namespaced_pod, self.namespace, _request_timeout=600):
                self.take(event["type"], self.api.sanitize_for_serialization(event["object"]))

    def take(self, kind: str, pod: dict[str, Any]) -> None:
        name, now = pod["metadata"]["name"], time.monotonic()
        if kind == "DELETED":
            self.pods.pop(name, None)
            self.deleted_at.setdefault(name, now)
        else:
            self.pods[name] = pod
            if pod["spec"].get("nodeName"):
                self.bound_at.setdefault(name, now)
            if pod["metadata"].get("deletionTimestamp"):
                self.terminating_at.setdefault(name, now)
        used: dict[str, int] = defaultdict(int)
        terminating = 0
        for held in self.pods.values():
            node = held["spec"].get("nodeName")
            if not node or held.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue
            used[node] += int(held["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
            terminating += bool(held["metadata"].get("deletionTimestamp"))
        self.peak_terminating = max(self.peak_terminating, terminating)
        for node, gpus in used.items():
            if gpus > self.capacity.get(node, 0) and self.violation is None:
                self.violation = f"{node}: {gpus} GPUs of {self.capacity.get(node)}: {sorted(self.pods)}"


async def test_reclaim_waits_for_the_victims_termination_grace(
    control_plane: ControlPlane, admin: client.ApiClient, broker: str, topic_prefix: str
) -> None:
    """examples/reclaim.yaml on the real server: qb runs four one-GPU pods (4 s termination grace) on two 2-GPU
    nodes; qa's two pods reclaim two of them. The evicted pods stay terminating for their grace (KWOK deletes them
    when it ends); the preemptors are Pipelined meanwhile and bound only after their victims are gone; no node
    ever holds more GPUs than it has."""
    suffix = uuid.uuid4().hex[:6]
    namespace = f"rc-{suffix}"
    v1, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    await send(v1.create_namespace, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    control_plane.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                         "metadata": {"name": "train"}, "value": 50})
    queues = {q: f"{namespace}-{q}" for q in ("qa", "qb")}
    unlimited = {"quota": -1, "overQuotaWeight": 1, "limit": -1}
    for queue in queues.values():
        await custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", {
            "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue},
            "spec": {"resources": {"gpu": {"quota": 2, "overQuotaWeight": 1, "limit": -1},
                                   "cpu": unlimited, "memory": unlimited}}})
    two_gpus = {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "2", "pods": "110"}
    nodes = [f"{namespace}-n{i}" for i in (1, 2)]
    for node in nodes:
        await send(v1.create_node, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        await v1.patch_node_status(node, {"status": {"capacity": two_gpus, "allocatable": two_gpus}})
        await send(v1.patch_node, node, {"spec": {"taints": None}}, _content_type="application/merge-patch+json")
    pod_watch = PodWatch(admin, namespace, {n: 2 for n in nodes})
    watching = asyncio.create_task(pod_watch.run())
    try:
        for i in range(4):
            body = _pod(f"b{i + 1}", namespace, queues["qb"], 1, grace_s=GRACE_S, priority_class="train")
            body["spec"]["nodeName"] = nodes[i // 2]
            await send(v1.create_namespaced_pod, namespace, body)
        async with Pipeline(_options(control_plane, broker, topic_prefix)) as pipeline:
            assert pipeline.tail is not None
            tail = pipeline.tail
            for name in ("a1", "a2"):
                await send(v1.create_namespaced_pod,
                    namespace, _pod(name, namespace, queues["qa"], 1, grace_s=GRACE_S, priority_class="train"))

            async def preemptors_bound() -> bool:
                return {"a1", "a2"} <= set(pod_watch.bound_at)

            await _until(preemptors_bound, "both preemptors bound", pipeline)
            await pipeline.wait_caught_up(timeout_s=60)
            decisions = tail.all_decisions()
            outcomes = [e for part in tail.events.values() for _, e in part]
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        await remove_test_objects(admin, namespace, f"{namespace}-")

    assert pod_watch.violation is None, f"over-committed: {pod_watch.violation}"
    assert pod_watch.peak_terminating > 0, "no victim stayed terminating: the test proves nothing"
    evictions = [d for d in decisions if isinstance(d, EvictionRequested)]
    victims = {d.name for d in evictions}
    assert len(victims) == 2 and victims <= {"b1", "b2", "b3", "b4"}, victims
    pipelined = {d.name for d in decisions if isinstance(d, PodPipelined)}
    assert pipelined == {"a1", "a2"}, pipelined
    for preemptor in ("a1", "a2"):
        bind = next(d for d in decisions if isinstance(d, BindRequested) and d.name == preemptor)
        freed = [v.name for v in evictions if v.node == bind.node]
        assert freed, f"{preemptor} bound on {bind.node}, where nothing was evicted"
        for victim in freed:
            assert pod_watch.deleted_at[victim] <= pod_watch.bound_at[preemptor], (
                f"{preemptor} bound before its victim {victim} was gone")
            assert pod_watch.deleted_at[victim] - pod_watch.terminating_at[victim] >= GRACE_S - 1
    assert not [e for e in outcomes if isinstance(e, BindFailed)], "the binder refused a bind the scheduler made"
    report = _audit(broker, topic_prefix)
    assert report["ok"], report.get("violation")
