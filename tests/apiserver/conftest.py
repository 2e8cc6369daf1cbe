"""Fixtures for the contract suite that runs against two servers: the simulated cluster and a real
kube-apiserver (etcd + kube-apiserver + KWOK, started once per session by ``ControlPlane``).

``server`` is parametrized over both; each test gets an admin kubernetes-asyncio client, a fresh namespace
and helpers to add nodes, so one test body asserts the same contract on each.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config

from kai_stream.connectors.apiserver import ControlPlane
from kai_stream.connectors.simcluster import SimCluster, api_client
from tests.kube_calls import send

NODE_CAPACITY = {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"}
SIM_HISTORY = 20


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + KWOK for the whole session (built on first use, see kai_stream/connectors/apiserver)."""
    plane = ControlPlane()
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
async def admin(control_plane: ControlPlane) -> AsyncIterator[client.ApiClient]:
    """An admin (system:masters) client of the session's real API server."""
    api = await kubeconfig_client(control_plane.kubeconfig)
    try:
        yield api
    finally:
        await api.close()


async def kubeconfig_client(path: Path) -> client.ApiClient:
    configuration = client.Configuration()
    await kube_config.load_kube_config(config_file=str(path), client_configuration=configuration)
    return client.ApiClient(configuration=configuration)


@dataclass
class Server:
    """One server under test: ``kind`` is "sim" or "apiserver"; ``namespace`` exists and is this test's own."""

    kind: str
    api: client.ApiClient
    namespace: str
    sim: SimCluster | None = None
    plane: ControlPlane | None = None

    @property
    def v1(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def name(self, base: str) -> str:
        """A cluster-scoped name unique to this test (nodes and queues outlive a test on the real server)."""
        return f"{self.namespace}-{base}"

    async def add_node(self, base: str, labels: dict[str, str] | None = None) -> str:
        name = self.name(base)
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}
        await send(self.v1.create_node, body)
        status = {"capacity": dict(NODE_CAPACITY), "allocatable": dict(NODE_CAPACITY)}
        await self.v1.patch_node_status(name, {"status": status})
        return name

    async def pod(self, name: str, *, node_name: str | None = None, labels: dict[str, str] | None = None,
                  grace_s: int = 0) -> client.V1Pod:
        spec: dict[str, Any] = {
            "schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": grace_s,
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
        if node_name is not None:
            spec["nodeName"] = node_name
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {}}, "spec": spec}
        created: client.V1Pod = await send(self.v1.create_namespaced_pod, self.namespace, body)
        return created

    async def find_pod(self, name: str) -> client.V1Pod | None:
        found = await self.v1.list_namespaced_pod(self.namespace, field_selector=f"metadata.name={name}")
        return found.items[0] if found.items else None

    async def until(self, check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
        """Poll the async ``check`` until it returns something truthy."""
        deadline = time.monotonic() + timeout
        while True:
            value = await check()
            if value:
                return value
            assert time.monotonic() < deadline, f"{self.kind}: timed out waiting for {what}"
            await asyncio.sleep(0.1)


async def remove_test_objects(api: client.ApiClient, namespace: str, prefix: str) -> None:
    """What a test left on the shared real server that another test's scheduler would see: the namespace's
    pods (no namespace controller runs to remove them), and the nodes and queues named with ``prefix``."""
    v1 = client.CoreV1Api(api)
    await v1.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    for node in (await v1.list_node()).items:
        if node.metadata.name.startswith(prefix):
            await v1.delete_node(node.metadata.name)
    custom = client.CustomObjectsApi(api)
    for queue in (await custom.list_cluster_custom_object("scheduling.run.ai", "v2", "queues"))["items"]:
        if queue["metadata"]["name"].startswith(prefix):
            await custom.delete_cluster_custom_object("scheduling.run.ai", "v2", "queues", queue["metadata"]["name"])


@pytest.fixture(params=["sim", "apiserver"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[Server]:
    namespace = f"ct-{uuid.uuid4().hex[:8]}"
    ns_body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    if request.param == "sim":
        sim = SimCluster(time_scale=1.0, bookmark_interval=0.2, termination_grace=None,
                         history_limit=SIM_HISTORY)
        url = await sim.start()
        async with api_client(url) as api:
            await send(client.CoreV1Api(api).create_namespace, ns_body)
            yield Server("sim", api, namespace, sim)
        await sim.stop()
        return
    plane: ControlPlane = request.getfixturevalue("control_plane")
    api = await kubeconfig_client(plane.kubeconfig)
    try:
        await send(client.CoreV1Api(api).create_namespace, ns_body)
        yield Server("apiserver", api, namespace, plane=plane)
        await remove_test_objects(api, namespace, f"{namespace}-")
    finally:
        await api.close()
