"""DRA objects (``resource.k8s.io/v1``) on both servers: the simulator and a real kube-apiserver accept the manifests,
the connector's list calls read them back, and the count-only translation (``core.dra``) turns them into a pod's
GPU request and a node's GPU devices, or a clear refusal."""

from __future__ import annotations

from typing import Any

from connectors.kubernetes.kinds import KIND_BY_NAME
from connectors.kubernetes.watcher import list_objects
from kai_stream.core.dra import DRA_KINDS, LABEL_DRA_GPUS, DraIndex
from kai_stream.core.events import NodeObserved, PodObserved
from kai_stream.core.manifests import object_to_events
from tests.apiserver.conftest import Server
from tests.kube_calls import send

GROUP, VERSION = "resource.k8s.io", "v1"


def _claim_spec(**exactly: Any) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


async def _listed(server: Server, kind: str) -> list[dict[str, Any]]:
    """The objects of ``kind`` as the connector lists them."""
    watched = KIND_BY_NAME[kind]
    items, _ = await list_objects(watched, watched.list_call(server.api))
    return list(items)


async def test_dra_objects_are_read_and_counted(server: Server) -> None:
    custom, ns = server.custom, server.namespace
    node = await server.add_node("dra")
    device_class = server.name("gpu")
    await send(custom.create_cluster_custom_object, GROUP, VERSION, "deviceclasses", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "DeviceClass", "metadata": {"name": device_class},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}})
    await send(custom.create_cluster_custom_object, GROUP, VERSION, "resourceslices", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice", "metadata": {"name": server.name("slice")},
        "spec": {"nodeName": node, "driver": "gpu.nvidia.com",
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}"} for i in range(3)]}})
    await send(custom.create_namespaced_custom_object, GROUP, VERSION, ns, "resourceclaimtemplates", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaimTemplate", "metadata": {"name": "two"},
        "spec": {"spec": _claim_spec(deviceClassName=device_class, allocationMode="ExactCount", count=2)}})
    await send(custom.create_namespaced_custom_object, GROUP, VERSION, ns, "resourceclaims", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim", "metadata": {"name": "picky"},
        "spec": _claim_spec(deviceClassName=device_class,
                            selectors=[{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].arch == "x"'}}])})
    for name, ref in (("counted", {"resourceClaimTemplateName": "two"}), ("refused", {"resourceClaimName": "picky"})):
        await send(server.v1.create_namespaced_pod, ns, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulerName": "kai-scheduler", "resourceClaims": [{"name": "gpu", **ref}],
                     "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}]}})
    try:
        index = DraIndex()
        for kind in DRA_KINDS:
            for item in await _listed(server, kind):
                index.upsert(item)
        pods = {p["metadata"]["name"]: p for p in await _listed(server, "Pod") if p["metadata"]["namespace"] == ns}
        for pod in pods.values():
            index.pod_seen(pod)
        nodes = [n for n in await _listed(server, "Node") if n["metadata"]["name"] == node]
        [node_event] = object_to_events(nodes[0], ts=0.0, dra=index)
        assert isinstance(node_event, NodeObserved)
        assert node_event.node.allocatable.gpu_milli == (8 + 3) * 1000
        assert node_event.node.labels[LABEL_DRA_GPUS] == "3"
        [counted] = object_to_events(pods["counted"], ts=0.0, dra=index)
        assert isinstance(counted, PodObserved)
        assert counted.pod.requests.gpu_milli == 2000 and counted.pod.refused is None
        [refused] = object_to_events(pods["refused"], ts=0.0, dra=index)
        assert isinstance(refused, PodObserved)
        assert "selectors on device attributes are not supported" in (refused.pod.refused or "")
    finally:
        await custom.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", server.name("slice"))
        await custom.delete_cluster_custom_object(GROUP, VERSION, "deviceclasses", device_class)
