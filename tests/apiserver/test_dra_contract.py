"""DRA objects (``resource.k8s.io/v1``) on both servers: the simulator and a real kube-apiserver accept the manifests,
the connector's list calls read them back, and the translation (``core.dra``) turns them into a pod's GPU request
and a node's GPU devices, or a clear refusal; the binder's allocation (``binder.dra``) is accepted and read back."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from kai_stream.binder.kube import KubeApplier, RetryPolicy
from kai_stream.connectors.kubernetes.kinds import KIND_BY_NAME
from kai_stream.connectors.kubernetes.watcher import list_objects
from kai_stream.core.dra import DRA_KINDS, LABEL_DRA_GPUS, DraIndex
from kai_stream.core.events import BindFailed, BindRequested, DraAllocation, NodeObserved, PodBound, PodObserved
from kai_stream.core.manifests import object_to_events
from tests.apiserver.conftest import Server, kubeconfig_client
from tests.binder.builders import bind
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


async def _binder_api(server: Server) -> client.ApiClient:
    """The binder's client: on the real server authenticated as the chart's binder ServiceAccount (RBAC applies)."""
    if server.plane is None:
        return server.api
    return await kubeconfig_client(server.plane.service_account_kubeconfig("binder"))


def _identity(pod: client.V1Pod) -> dict[str, Any]:
    meta = pod.metadata
    return {"metadata": {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid}}


async def test_the_binder_allocates_the_devices_to_the_claims(server: Server) -> None:
    """The binder's DRA allocation (``binder.dra``) as each server validates it: ``status.allocation`` and
    ``reservedFor`` written before the binding, a re-delivered decision writes nothing, a claim allocated to other
    devices fails the bind, a template's claim is made, named in the pod's status and allocated, and a binding refused
    after the allocation gives the devices back."""
    custom, ns = server.custom, server.namespace
    node = await server.add_node("alloc")
    device_class = server.name("gpu")
    await send(custom.create_cluster_custom_object, GROUP, VERSION, "deviceclasses", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "DeviceClass", "metadata": {"name": device_class},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}})
    await send(custom.create_cluster_custom_object, GROUP, VERSION, "resourceslices", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice", "metadata": {"name": server.name("alloc")},
        "spec": {"nodeName": node, "driver": "gpu.nvidia.com",
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}"} for i in range(3)]}})
    for name in ("one", "taken", "moved"):
        await send(custom.create_namespaced_custom_object, GROUP, VERSION, ns, "resourceclaims", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": _claim_spec(deviceClassName=device_class, count=1)})
    await send(custom.create_namespaced_custom_object, GROUP, VERSION, ns, "resourceclaimtemplates", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaimTemplate", "metadata": {"name": "two"},
        "spec": {"spec": _claim_spec(deviceClassName=device_class, count=2)}})
    elsewhere = await server.add_node("elsewhere")
    pods: dict[str, client.V1Pod] = {}
    for name, ref in (("first", {"resourceClaimName": "one"}), ("other", {"resourceClaimName": "taken"}),
                      ("templated", {"resourceClaimTemplateName": "two"}), ("moved", {"resourceClaimName": "moved"})):
        pods[name] = await send(server.v1.create_namespaced_pod, ns, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulerName": "kai-scheduler", "resourceClaims": [{"name": "gpu", **ref}],
                     **({"nodeName": elsewhere} if name == "moved" else {}),
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"claims": [{"name": "gpu"}]}}]}})

    def decided(pod: str, offset: int, claim: str | None, *devices: int) -> BindRequested:
        return bind(_identity(pods[pod]), node, offset=offset, gpus=devices).model_copy(update={"dra_devices": tuple(
            DraAllocation(claim="gpu", resource_claim=claim, request="gpu", driver="gpu.nvidia.com", pool=node,
                          device=f"gpu-{d}") for d in devices)})

    async def claim_of(name: str) -> dict[str, Any]:
        got: dict[str, Any] = await custom.get_namespaced_custom_object(GROUP, VERSION, ns, "resourceclaims", name)
        return got

    async def pod(name: str) -> client.V1Pod:
        found = await server.find_pod(name)
        assert found is not None, name
        return found

    def devices_of(claim: dict[str, Any]) -> list[str]:
        return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]

    api = await _binder_api(server)
    try:
        applier = KubeApplier(api, RetryPolicy(attempts=3, base_delay_s=0.05, max_delay_s=0.2))
        assert isinstance(await applier.bind(decided("first", 1, "one", 1)), PodBound)
        one = await claim_of("one")
        assert devices_of(one) == ["gpu-1"]
        assert one["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [node]
        assert [(r["resource"], r["name"], r["uid"]) for r in one["status"]["reservedFor"]] == [
            ("pods", "first", pods["first"].metadata.uid)]
        assert (await pod("first")).spec.node_name == node
        again = await applier.bind(decided("first", 1, "one", 1))
        assert isinstance(again, PodBound) and again.already
        assert (await claim_of("one"))["metadata"]["resourceVersion"] == one["metadata"]["resourceVersion"]

        taken = await claim_of("taken")
        taken["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": "gpu-0"}]}}}
        await custom.replace_namespaced_custom_object_status(GROUP, VERSION, ns, "resourceclaims", "taken", taken)
        refused = await applier.bind(decided("other", 2, "taken", 2))
        assert isinstance(refused, BindFailed), refused
        assert f"is already allocated to {node}/gpu-0, not {node}/gpu-2" in refused.error
        assert not (await pod("other")).spec.node_name

        assert isinstance(await applier.bind(decided("templated", 3, None, 0, 2), check_first=False), PodBound)
        status = (await pod("templated")).status
        [made] = [s.resource_claim_name for s in status.resource_claim_statuses if s.name == "gpu"]
        assert devices_of(await claim_of(made)) == ["gpu-0", "gpu-2"]

        # bound elsewhere meanwhile: the binding is refused and the claim given back (written twice)
        before = (await claim_of("moved"))["metadata"]["resourceVersion"]
        moved = await applier.bind(decided("moved", 4, "moved", 1), check_first=False)
        assert isinstance(moved, BindFailed) and f"already bound to node {elsewhere}" in moved.error, moved
        back = await claim_of("moved")
        assert back["metadata"]["resourceVersion"] != before, "the claim was never allocated"
        assert not (back.get("status") or {}).get("allocation")
        assert not (back.get("status") or {}).get("reservedFor")
    finally:
        if api is not server.api:
            await api.close()
        await custom.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", server.name("alloc"))
        await custom.delete_cluster_custom_object(GROUP, VERSION, "deviceclasses", device_class)
