"""Discovery, create/get/replace/delete and `Status` errors, driven through kubernetes-asyncio over HTTP."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from kai_stream.connectors.simcluster import SimCluster
from tests.kube_calls import send, status_of

from .manifests import node, pod


async def test_discovery(api: client.ApiClient) -> None:
    version = await client.VersionApi(api).get_code()
    assert version.major == "1"
    assert "v1" in (await client.CoreApi(api).get_api_versions()).versions
    core = await client.CoreV1Api(api).get_api_resources()
    names = {r.name for r in core.resources}
    assert {"pods", "nodes", "pods/binding", "pods/eviction", "pods/status"} <= names
    groups = await client.ApisApi(api).get_api_versions()
    by_name = {g.name: [v.version for v in g.versions] for g in groups.groups}
    assert by_name["scheduling.run.ai"] == ["v2", "v2alpha2"]
    assert by_name["kai.scheduler"] == ["v1alpha1"]
    sched = await client.SchedulingV1Api(api).get_api_resources()
    assert [r.name for r in sched.resources] == ["priorityclasses"]


async def test_create_assigns_identity_and_global_resource_version(v1: client.CoreV1Api) -> None:
    first = await send(v1.create_namespaced_pod, "default", pod("a"))
    second = await send(v1.create_namespaced_pod, "team", pod("b", "team"))
    created_node = await send(v1.create_node, node("n1"))
    assert first.metadata.uid and second.metadata.uid and first.metadata.uid != second.metadata.uid
    assert first.metadata.creation_timestamp is not None
    versions = [int(o.metadata.resource_version) for o in (first, second, created_node)]
    assert versions == sorted(versions) and len(set(versions)) == 3
    assert first.status.phase == "Pending"
    assert created_node.status.allocatable["nvidia.com/gpu"] == "8"
    namespaces = {n.metadata.name for n in (await v1.list_namespace()).items}
    assert {"default", "team"} <= namespaces
    got = await v1.read_namespaced_pod("a", "default")
    assert got.metadata.uid == first.metadata.uid


async def test_errors_are_status_objects(v1: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as missing:
        await v1.read_namespaced_pod("nope", "default")
    assert missing.value.status == 404
    body = status_of(missing.value)
    assert (body["kind"], body["status"], body["reason"], body["code"]) == ("Status", "Failure", "NotFound", 404)
    assert body["message"] == 'pods "nope" not found'

    await send(v1.create_namespaced_pod, "default", pod("dup"))
    with pytest.raises(ApiException) as dup:
        await send(v1.create_namespaced_pod, "default", pod("dup"))
    assert dup.value.status == 409 and status_of(dup.value)["reason"] == "AlreadyExists"

    with pytest.raises(ApiException) as wrong_ns:
        await send(v1.create_namespaced_pod, "other", pod("x", "default"))
    assert wrong_ns.value.status == 400 and status_of(wrong_ns.value)["reason"] == "BadRequest"


async def test_replace_checks_resource_version_and_keeps_status(v1: client.CoreV1Api) -> None:
    created = await send(v1.create_namespaced_pod, "default", pod("r"))
    created.metadata.labels = {"tier": "gold"}
    created.status.phase = "Running"
    replaced = await v1.replace_namespaced_pod("r", "default", created)
    assert replaced.metadata.labels == {"tier": "gold"}
    assert replaced.status.phase == "Pending", "the main resource must ignore status"
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    with pytest.raises(ApiException) as stale:
        await v1.replace_namespaced_pod("r", "default", created)
    assert stale.value.status == 409 and status_of(stale.value)["reason"] == "Conflict"


async def test_pod_spec_node_name_is_immutable_outside_binding(v1: client.CoreV1Api) -> None:
    await send(v1.create_namespaced_pod, "default", pod("imm"))
    with pytest.raises(ApiException) as forbidden:
        await send(v1.patch_namespaced_pod, "imm", "default", {"spec": {"nodeName": "n1"}},
                                      _content_type="application/merge-patch+json")
    assert forbidden.value.status == 422 and status_of(forbidden.value)["reason"] == "Invalid"


async def test_delete_returns_object_and_emits_nothing_further(v1: client.CoreV1Api, sim: SimCluster) -> None:
    await send(v1.create_namespaced_pod, "default", pod("d"))
    deleted = await v1.delete_namespaced_pod("d", "default")
    assert deleted.metadata.name == "d"
    assert sim.find("pods/default/d") is None
    with pytest.raises(ApiException) as gone:
        await v1.delete_namespaced_pod("d", "default")
    assert gone.value.status == 404


async def test_unknown_path_is_status_404(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        await api.call_api("/apis/example.com/v1/widgets", "GET", response_types_map={200: "object"},
                           auth_settings=["BearerToken"])
    assert err.value.status == 404 and status_of(err.value)["kind"] == "Status"


@pytest.mark.parametrize("sim_options", [{"termination_grace": 30.0}])
async def test_delete_collection_and_grace_period_zero(v1: client.CoreV1Api, sim: SimCluster) -> None:
    sim.load_objects([node("n1"), pod("keep", labels={"job": "b"}, node_name="n1")])
    for name in ("x1", "x2"):
        await send(v1.create_namespaced_pod, "default", pod(name, labels={"job": "a"}))
    await v1.delete_collection_namespaced_pod("default", label_selector="job=a")
    assert [p["metadata"]["name"] for p in sim.objects("pods")] == ["keep"]
    marked = await v1.delete_namespaced_pod("keep", "default")
    assert marked.metadata.deletion_timestamp is not None, "a running pod terminates gracefully"
    await v1.delete_namespaced_pod("keep", "default", grace_period_seconds=0)
    assert sim.objects("pods") == []
