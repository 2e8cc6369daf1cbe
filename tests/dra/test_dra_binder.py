"""The binder writes a bind's DRA devices to the pod's ResourceClaims before the binding (``binder.dra``), on the
simulated cluster: ``status.allocation`` and ``reservedFor``; a re-delivered decision changes nothing; a claim
allocated to other devices fails the bind with the reason and no binding is POSTed; a template's claim is made
and named in the pod's status. The same bodies run against a real kube-apiserver in
``tests/apiserver/test_dra_contract.py``."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from kai_stream.binder.kube import KubeApplier, RetryPolicy
from kai_stream.connectors.simcluster import SimCluster, api_client
from kai_stream.core.events import BindFailed, BindRequested, DraAllocation, PodBound
from tests.binder.builders import bind, node

FAST = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05)
DRIVER = "gpu.nvidia.com"
NS = "team-a"


def slice_(node_name: str, devices: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node_name}-gpus"},
            "spec": {"nodeName": node_name, "driver": DRIVER,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}"} for i in range(devices)]}}


def device_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def claim_spec(count: int) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": count}}]}}


def claim(name: str, count: int = 1, namespace: str = NS) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace}, "spec": claim_spec(count)}


def template(name: str, count: int, namespace: str = NS) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": claim_spec(count)}}


def claiming_pod(name: str, namespace: str = NS, **ref: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"kai.scheduler/queue": "q"}},
            "spec": {"schedulerName": "kai-scheduler", "resourceClaims": [{"name": "gpu", **ref}],
                     "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}]}}


def with_devices(decision: BindRequested, resource_claim: str | None, *devices: str) -> BindRequested:
    return decision.model_copy(update={"dra_devices": tuple(
        DraAllocation(claim="gpu", resource_claim=resource_claim, request="gpu", driver=DRIVER, pool=decision.node,
                      device=d) for d in devices)})


def results(obj: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    found = ((obj.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return [(r["request"], r["driver"], r["pool"], r["device"]) for r in found]


async def test_claims_get_the_devices_before_the_binding_idempotently() -> None:
    async with SimCluster(time_scale=0.01) as sim:
        assert sim.url is not None
        for obj in (node("n1", gpus=0), device_class(), slice_("n1", 2), claim("one"), claim("taken")):
            await sim.create(obj)
        first = await sim.create(claiming_pod("first", resourceClaimName="one"))
        async with api_client(sim.url) as api:
            applier = KubeApplier(api, FAST)
            decision = with_devices(bind(first, "n1", gpus=(1,)), "one", "gpu-1")
            assert isinstance(await applier.bind(decision), PodBound)
            written = sim.get("resourceclaims", NS, "one")
            assert results(written) == [("gpu", DRIVER, "n1", "gpu-1")]
            allocation = written["status"]["allocation"]
            assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"] == [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]}]
            assert written["status"]["reservedFor"] == [
                {"resource": "pods", "name": "first", "uid": first["metadata"]["uid"]}]
            assert sim.get("pods", NS, "first")["spec"]["nodeName"] == "n1"

            again = await applier.bind(decision)
            assert isinstance(again, PodBound) and again.already
            assert sim.get("resourceclaims", NS, "one")["metadata"]["resourceVersion"] == \
                written["metadata"]["resourceVersion"], "a re-delivered decision wrote the claim again"

            # a claim another allocator gave gpu-0: the decision for gpu-1 is refused, nothing bound
            taken = sim.get("resourceclaims", NS, "taken")
            other = await sim.create(claiming_pod("other", resourceClaimName="taken"))
            await applier.claims._put_status(NS, "taken", {**taken, "status": {"allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}}})
            refused = await applier.bind(with_devices(bind(other, "n1", offset=2, gpus=(1,)), "taken", "gpu-1"))
            assert isinstance(refused, BindFailed)
            assert "ResourceClaim team-a/taken is already allocated to n1/gpu-0, not n1/gpu-1" in refused.error
            assert not [b for b in sim.bindings if b.name == "other"], "bound although its claim was refused"
            assert results(sim.get("resourceclaims", NS, "taken")) == [("gpu", DRIVER, "n1", "gpu-0")]


async def test_a_templates_claim_is_made_named_and_allocated() -> None:
    async with SimCluster(time_scale=0.01) as sim:
        assert sim.url is not None
        for obj in (node("n1", gpus=0), device_class(), slice_("n1", 2), template("two", 2)):
            await sim.create(obj)
        p = await sim.create(claiming_pod("p", resourceClaimTemplateName="two"))
        async with api_client(sim.url) as api:
            applier = KubeApplier(api, FAST)
            decision = with_devices(bind(p, "n1", gpus=(0, 1)), None, "gpu-0", "gpu-1")
            assert isinstance(await applier.bind(decision, check_first=False), PodBound)
            [made] = sim.objects("ResourceClaim", NS)
            assert made["metadata"]["ownerReferences"][0]["uid"] == p["metadata"]["uid"]
            assert made["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
            assert results(made) == [("gpu", DRIVER, "n1", "gpu-0"), ("gpu", DRIVER, "n1", "gpu-1")]
            status = sim.get("pods", NS, "p")["status"]
            assert status["resourceClaimStatuses"] == [{"name": "gpu", "resourceClaimName": made["metadata"]["name"]}]
            assert isinstance(await applier.bind(decision), PodBound)
            assert len(sim.objects("ResourceClaim", NS)) == 1


async def test_a_bind_without_devices_for_a_claiming_pod_is_refused() -> None:
    async with SimCluster(time_scale=0.01) as sim:
        assert sim.url is not None
        for obj in (node("n1", gpus=2), device_class(), claim("one")):
            await sim.create(obj)
        p = await sim.create(claiming_pod("p", resourceClaimName="one"))
        async with api_client(sim.url) as api:
            refused = await KubeApplier(api, FAST).bind(bind(p, "n1", gpus=(0,)))
        assert isinstance(refused, BindFailed)
        assert "has DRA claims but the decision allocates no devices" in refused.error
        assert not sim.bindings


async def test_a_deleted_pods_claims_are_released_for_the_next_pod() -> None:
    """As kube-controller-manager does: the claim named by a deleted pod is free again, its template claim gone."""
    async with SimCluster(time_scale=0.01) as sim:
        assert sim.url is not None
        for obj in (node("n1", gpus=0), device_class(), slice_("n1", 2), claim("one"), template("two", 1)):
            await sim.create(obj)
        first = await sim.create(claiming_pod("first", resourceClaimName="one"))
        made = await sim.create(claiming_pod("made", resourceClaimTemplateName="two"))
        async with api_client(sim.url) as api:
            applier = KubeApplier(api, FAST)
            assert isinstance(await applier.bind(with_devices(bind(first, "n1", gpus=(0,)), "one", "gpu-0")), PodBound)
            assert isinstance(await applier.bind(with_devices(bind(made, "n1", gpus=(1,)), None, "gpu-1")), PodBound)
            await client.CoreV1Api(api).delete_namespaced_pod("first", NS, grace_period_seconds=0)
            await client.CoreV1Api(api).delete_namespaced_pod("made", NS, grace_period_seconds=0)
            await sim.wait_until(lambda: sim.find("pods", NS, "made") is None, timeout=10)
            assert [c["metadata"]["name"] for c in sim.objects("ResourceClaim", NS)] == ["one"]
            assert "allocation" not in sim.get("resourceclaims", NS, "one").get("status", {})
            second = await sim.create(claiming_pod("second", resourceClaimName="one"))
            bound = await applier.bind(with_devices(bind(second, "n1", offset=2, gpus=(1,)), "one", "gpu-1"))
            assert isinstance(bound, PodBound), bound


async def test_a_refused_binding_gives_the_devices_back() -> None:
    """The claim took the devices, then the binding was refused (the pod was bound elsewhere meanwhile): the claim
    is left as it was before."""
    async with SimCluster(time_scale=0.01) as sim:
        assert sim.url is not None
        for obj in (node("n1", gpus=0), node("n2", gpus=0), device_class(), slice_("n1", 2), claim("one")):
            await sim.create(obj)
        elsewhere = claiming_pod("p", resourceClaimName="one")
        elsewhere["spec"]["nodeName"] = "n2"
        p = await sim.create(elsewhere)
        allocated: list[bool] = []
        sim.store.add_listener(lambda change, obj, old: allocated.append(
            "allocation" in (obj.get("status") or {})) if change.resource.plural == "resourceclaims" else None)
        async with api_client(sim.url) as api:
            refused = await KubeApplier(api, FAST).bind(
                with_devices(bind(p, "n1", gpus=(0,)), "one", "gpu-0"), check_first=False)
        assert isinstance(refused, BindFailed) and "already bound to node n2" in refused.error
        status = sim.get("resourceclaims", NS, "one").get("status") or {}
        assert "allocation" not in status and "reservedFor" not in status, status
        assert allocated == [True, False], "the claim was not allocated and then given back"
