"""Binding, eviction, patches and `/status` through kubernetes-asyncio, including the client quirks:
the binding response does not deserialize (use `_preload_content=False`) and custom-object patches need
`_content_type="application/merge-patch+json"`."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from kai_stream.connectors.simcluster import SimCluster
from tests.kube_calls import send, status_of

from .manifests import binding, node, pod

MERGE = "application/merge-patch+json"


async def test_binding_201_status_then_409_and_404(
    v1: client.CoreV1Api, sim: SimCluster, api: client.ApiClient
) -> None:
    sim.load_objects([node("n1"), node("n2")])
    await send(v1.create_namespaced_pod, "default", pod("b1"))

    response = await send(
        v1.create_namespaced_pod_binding, "b1", "default", binding("b1", "n1"), _preload_content=False
    )
    assert response.status == 201
    body = json.loads(await response.read())
    assert (body["kind"], body["status"], body["code"]) == ("Status", "Success", 201)
    bound = await v1.read_namespaced_pod("b1", "default")
    assert bound.spec.node_name == "n1"
    scheduled = [c for c in bound.status.conditions if c.type == "PodScheduled"]
    assert [(c.status) for c in scheduled] == ["True"]

    # With _preload_content=False the client raises nothing for an error code: read the status yourself.
    already = await send(v1.create_namespaced_pod_binding, "b1", "default", binding("b1", "n2"), _preload_content=False)
    assert already.status == 409
    status = json.loads(await already.read())
    assert status["reason"] == "Conflict" and 'already assigned to node "n1"' in status["message"]

    missing = await send(
        v1.create_namespaced_pod_binding, "ghost", "default", binding("ghost", "n1"), _preload_content=False
    )
    assert missing.status == 404 and json.loads(await missing.read())["reason"] == "NotFound"

    assert [(r.name, r.node, r.code) for r in sim.bindings] == [("b1", "n1", 201), ("b1", "n2", 409),
                                                                ("ghost", "n1", 404)]
    assert sim.binding_count == 3
    first = sim.bindings[0]
    assert first.latency is not None and first.latency >= 0
    report = await api.call_api("/debug/simcluster/bindings", "GET", response_types_map={200: "object"},
                                _return_http_data_only=True)
    assert report["count"] == 3 and [b["code"] for b in report["bindings"]] == [201, 409, 404]


async def test_binding_quirk_default_deserialization_fails_but_the_pod_is_bound(
    v1: client.CoreV1Api, sim: SimCluster
) -> None:
    sim.load_objects([node("n1")])
    await send(v1.create_namespaced_pod, "default", pod("q"))
    with pytest.raises(ValueError, match="target"):
        await v1.create_namespaced_pod_binding("q", "default", binding("q", "n1"))
    assert (await v1.read_namespaced_pod("q", "default")).spec.node_name == "n1"


async def test_eviction_deletes_the_pod(v1: client.CoreV1Api, sim: SimCluster) -> None:
    sim.load_objects([node("n1"), pod("victim", node_name="n1")])
    assert sim.get("pods/default/victim")["status"]["phase"] == "Running"
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="victim", namespace="default"))
    result = await v1.create_namespaced_pod_eviction("victim", "default", eviction)
    assert result is not None
    assert sim.find("pods/default/victim") is None
    assert [(e.name, e.code) for e in sim.evictions] == [("victim", 201)]
    with pytest.raises(ApiException) as missing:
        await v1.create_namespaced_pod_eviction("victim", "default", eviction)
    assert missing.value.status == 404


@pytest.mark.parametrize("sim_options", [{"termination_grace": 10.0, "time_scale": 0.02}])
async def test_graceful_eviction_marks_deletion_timestamp_first(v1: client.CoreV1Api, sim: SimCluster) -> None:
    sim.load_objects([node("n1"), pod("slow", node_name="n1")])
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="slow", namespace="default"))
    await v1.create_namespaced_pod_eviction("slow", "default", eviction)
    terminating = await v1.read_namespaced_pod("slow", "default")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 10
    refused = await send(
        v1.create_namespaced_pod_binding, "slow", "default", binding("slow", "n1"), _preload_content=False
    )
    assert refused.status == 409
    await sim.wait_until(lambda: sim.find("pods/default/slow") is None, timeout=3)


async def test_merge_json_and_strategic_patches_and_415(v1: client.CoreV1Api, api: client.ApiClient) -> None:
    await send(v1.create_namespaced_pod, "default", pod("p", labels={"a": "1", "b": "2"}))
    merged = await send(v1.patch_namespaced_pod, "p", "default", {"metadata": {"labels": {"a": None, "c": "3"}}},
                                           _content_type=MERGE)
    assert merged.metadata.labels == {"b": "2", "c": "3"}
    patched = await v1.patch_namespaced_pod(
        "p", "default", [{"op": "add", "path": "/metadata/annotations/kai.scheduler~1note", "value": "x"},
                         {"op": "replace", "path": "/metadata/labels/b", "value": "20"},
                         {"op": "test", "path": "/metadata/labels/c", "value": "3"}])
    assert patched.metadata.annotations["kai.scheduler/note"] == "x"
    assert patched.metadata.labels["b"] == "20"
    strategic = await v1.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"d": "4"}}})
    assert strategic.metadata.labels == {"b": "20", "c": "3", "d": "4"}
    with pytest.raises(ApiException) as failed_test:
        await v1.patch_namespaced_pod("p", "default", [{"op": "test", "path": "/metadata/labels/c", "value": "9"}])
    assert failed_test.value.status == 422
    with pytest.raises(ApiException) as unsupported:
        await send(
            v1.patch_namespaced_pod, "p", "default", {"metadata": {}}, _content_type="application/apply-patch+yaml"
        )
    assert unsupported.value.status == 415
    assert status_of(unsupported.value)["reason"] == "UnsupportedMediaType"


async def test_pod_status_subresource(v1: client.CoreV1Api) -> None:
    await send(v1.create_namespaced_pod, "default", pod("s", labels={"keep": "me"}))
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "queue team-a is over quota"}
    updated = await v1.patch_namespaced_pod_status(
        "s", "default", {"metadata": {"labels": {"ignored": "1"}}, "status": {"conditions": [condition]}})
    assert [(c.type, c.status, c.reason) for c in updated.status.conditions] == [
        ("PodScheduled", "False", "Unschedulable")]
    assert updated.metadata.labels == {"keep": "me"}, "a /status write must not change metadata"
    read = await v1.read_namespaced_pod_status("s", "default")
    assert read.status.conditions[0].message == "queue team-a is over quota"
    updated.status.phase = "Failed"
    replaced = await v1.replace_namespaced_pod_status("s", "default", updated)
    assert replaced.status.phase == "Failed"


async def test_strategic_patch_merges_conditions_by_type(v1: client.CoreV1Api) -> None:
    await send(v1.create_namespaced_pod, "default", pod("c"))
    first = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    other = {"type": "DisruptionTarget", "status": "True"}
    await v1.patch_namespaced_pod_status("c", "default", {"status": {"conditions": [first, other]}})
    cleared = await send(
        v1.patch_namespaced_pod_status,
        "c",
        "default",
        {"status": {"conditions": [{"type": "PodScheduled", "status": "True", "reason": None}]}},
    )
    assert [(c.type, c.status, c.reason) for c in cleared.status.conditions] == [
        ("PodScheduled", "True", None), ("DisruptionTarget", "True", None)]
