"""The pipeline on a real kube-apiserver: pods created through the API are observed by the connector, decided by
the processor (a faust subprocess) and bound by the binder; KWOK then runs them. The connector and the binder
authenticate with tokens of the chart's ServiceAccounts, so RBAC allows them exactly what the chart's
ClusterRoles grant."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client.exceptions import ApiException

from kai_stream.binder.runner import run_binder
from kai_stream.connectors.apiserver import ControlPlane
from kai_stream.connectors.kubernetes import KubernetesConnector
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames
from tests.kube_calls import send

from .conftest import kubeconfig_client, remove_test_objects

pytestmark = pytest.mark.apiserver

GPU_NODE = {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4", "pods": "110"}


async def _configuration(path: Path) -> client.Configuration:
    configuration = client.Configuration()
    await kube_config.load_kube_config(config_file=str(path), client_configuration=configuration)
    return configuration


def _pod(name: str, namespace: str, queue: str, gpus: int, *, grace_s: int = 0,
         priority_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": grace_s,
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "1"}}}]}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"kai.scheduler/queue": queue}},
            "spec": spec}


class Components:
    """Connector (a task, connector ServiceAccount), processor (subprocess) and binder (a task, binder
    ServiceAccount) against the control plane, on the session broker under a fresh topic prefix."""

    def __init__(self, plane: ControlPlane, kafka: KafkaSettings, names: TopicNames, prefix: str,
                 workdir: Path) -> None:
        self.plane, self.kafka, self.names, self.prefix, self.workdir = plane, kafka, names, prefix, workdir
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.processor: subprocess.Popen[bytes] | None = None
        self.binder_stop = asyncio.Event()
        self.connector_api: client.ApiClient | None = None

    async def start(self) -> None:
        self.connector_api = await kubeconfig_client(self.plane.service_account_kubeconfig("connector"))
        connector = KubernetesConnector(self.connector_api, self.kafka, self.names, tick_interval_s=0.5)
        self.tasks["connector"] = asyncio.create_task(connector.run(), name="connector")
        await asyncio.wait_for(connector.synced.wait(), 60)
        env = {
            **os.environ,
            "KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS": self.kafka.bootstrap_servers,
            "KAI_STREAM_KAFKA_SESSION_TIMEOUT_MS": str(self.kafka.session_timeout_ms),
            "KAI_STREAM_KAFKA_HEARTBEAT_INTERVAL_MS": str(self.kafka.heartbeat_interval_ms),
            "KAI_STREAM_PROCESSOR_APP_ID": f"{self.prefix}kai-stream-scheduler",
            "KAI_STREAM_PROCESSOR_TOPIC_PREFIX": self.prefix,
            "KAI_STREAM_PROCESSOR_DATA_DIR": str(self.workdir / "faust"),
            "KAI_STREAM_HEALTH_ENABLED": "false",
            "KAI_STREAM_PROCESSOR_PARENT_PID": str(os.getpid()),
        }
        with open(self.workdir / "processor.log", "ab") as log:
            self.processor = subprocess.Popen([sys.executable, "-m", "kai_stream.streams"], env=env,
                                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True)
        binder_config = await _configuration(self.plane.service_account_kubeconfig("binder"))
        self.tasks["binder"] = asyncio.create_task(
            run_binder(self.kafka, binder_config, stop_event=self.binder_stop, topics=self.names,
                       group_id=f"{self.prefix}kai-stream-binder"), name="binder")

    def failed(self) -> str | None:
        for name, task in self.tasks.items():
            if task.done() and not task.cancelled() and task.exception() is not None:
                return f"{name}: {task.exception()!r}"
        if self.processor is not None and self.processor.poll() is not None:
            return f"processor exited {self.processor.returncode}: {self.processor_log()}"
        return None

    def processor_log(self) -> str:
        path = self.workdir / "processor.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    async def stop(self) -> None:
        self.binder_stop.set()
        binder = self.tasks.pop("binder", None)
        if binder is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(binder, 20)
        for task in self.tasks.values():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.processor is not None and self.processor.poll() is None:
            self.processor.terminate()
            try:
                await asyncio.to_thread(self.processor.wait, 15)
            except subprocess.TimeoutExpired:
                self.processor.kill()
        if self.connector_api is not None:
            await self.connector_api.close()


@pytest.fixture
async def pipeline(control_plane: ControlPlane, kafka_settings: KafkaSettings, topics: TopicNames,
                   topic_prefix: str, tmp_path: Path) -> AsyncIterator[Components]:
    components = Components(control_plane, kafka_settings, topics, topic_prefix, tmp_path)
    try:
        await components.start()
        yield components
    finally:
        await components.stop()


async def _until(check: Callable[[], Awaitable[Any]], what: str, components: Components,
                 timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        failure = components.failed()
        assert failure is None, failure
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{components.processor_log()}"
        await asyncio.sleep(0.2)


async def _setup_cluster(admin: client.ApiClient, suffix: str, nodes: int) -> tuple[str, str, list[str]]:
    """Namespace, queue and GPU nodes of this test (named e2e-<suffix>-*: nodes and queues are cluster-wide)."""
    v1 = client.CoreV1Api(admin)
    namespace = f"e2e-{suffix}"
    await send(v1.create_namespace, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    queue = f"{namespace}-q"
    unlimited = {"quota": -1, "overQuotaWeight": 1, "limit": -1}
    await client.CustomObjectsApi(admin).create_cluster_custom_object("scheduling.run.ai", "v2", "queues", {
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue},
        "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}})
    names = []
    for i in range(nodes):
        name = f"{namespace}-gpu-{i}"
        await send(v1.create_node, {"apiVersion": "v1", "kind": "Node",
                              "metadata": {"name": name, "labels": {"nvidia.com/gpu.memory": "81920"}}})
        await v1.patch_node_status(name, {"status": {"capacity": GPU_NODE, "allocatable": GPU_NODE}})
        # TaintNodesByCondition gives a new node node.kubernetes.io/not-ready; no node lifecycle controller runs
        # to lift it once KWOK reports Ready, so lift it here as that controller would.
        await send(v1.patch_node, name, {"spec": {"taints": None}}, _content_type="application/merge-patch+json")
        names.append(name)
    return namespace, queue, names


async def test_pods_created_on_the_api_server_are_bound_and_run(
    control_plane: ControlPlane, admin: client.ApiClient, pipeline: Components
) -> None:
    suffix = uuid.uuid4().hex[:6]
    namespace, queue, nodes = await _setup_cluster(admin, suffix, nodes=2)
    try:
        await _bind_and_run(admin, namespace, queue, nodes, pipeline)
    finally:
        await remove_test_objects(admin, namespace, f"{namespace}-")


async def _bind_and_run(admin: client.ApiClient, namespace: str, queue: str, nodes: list[str],
                        pipeline: Components) -> None:
    v1 = client.CoreV1Api(admin)
    names = [f"train-{i}" for i in range(5)]
    for i, name in enumerate(names):
        await send(v1.create_namespaced_pod, namespace, _pod(name, namespace, queue, gpus=1 + i % 2))

    async def all_running() -> list[client.V1Pod] | None:
        pods = (await v1.list_namespaced_pod(namespace)).items
        done = len(pods) == len(names) and all(p.status.phase == "Running" for p in pods)
        return pods if done else None

    try:
        pods = await _until(all_running, "every pod bound and Running (KWOK)", pipeline)
    except AssertionError as failure:
        seen = [(p.metadata.name, p.spec.node_name, p.status.phase, p.status.conditions)
                for p in (await v1.list_namespaced_pod(namespace)).items]
        raise AssertionError(f"{failure}\npods: {seen}") from None
    assert all(p.spec.node_name in nodes for p in pods)
    used: dict[str, int] = {}
    for pod in pods:
        gpus = int(pod.spec.containers[0].resources.limits["nvidia.com/gpu"])
        used[pod.spec.node_name] = used.get(pod.spec.node_name, 0) + gpus
        assert [c.status for c in pod.status.conditions if c.type == "PodScheduled"] == ["True"]
    assert sum(used.values()) == 7 and all(total <= 4 for total in used.values()), used


async def test_the_chart_rbac_is_what_the_components_get(control_plane: ControlPlane) -> None:
    """The ServiceAccount tokens are really limited: the binder may bind and list/watch pods and nodes (its room
    view), but not delete pods or change nodes; the connector may watch but not bind or delete."""
    connector = await kubeconfig_client(control_plane.service_account_kubeconfig("connector"))
    binder = await kubeconfig_client(control_plane.service_account_kubeconfig("binder"))
    try:
        await client.CoreV1Api(connector).list_pod_for_all_namespaces(limit=1)
        await client.CoreV1Api(binder).list_pod_for_all_namespaces(limit=1)
        await client.CoreV1Api(binder).list_node(limit=1)
        with pytest.raises(ApiException) as changing:
            await client.CoreV1Api(binder).delete_node("any")
        assert changing.value.status == 403
        with pytest.raises(ApiException) as removing:
            await client.CoreV1Api(binder).delete_namespaced_pod("any", "default")
        assert removing.value.status == 403
        with pytest.raises(ApiException) as deleting:
            await client.CoreV1Api(connector).delete_namespaced_pod("any", "default")
        assert deleting.value.status == 403
        with pytest.raises(ApiException) as creating:
            await send(client.CoreV1Api(binder).create_namespaced_pod, "default", _pod("x", "default", "q", 1))
        assert creating.value.status == 403
    finally:
        await connector.close()
        await binder.close()
