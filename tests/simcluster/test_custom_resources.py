"""KAI custom resources (Queue, PodGroup, Topology) and PriorityClass through CustomObjectsApi and
SchedulingV1Api, including the merge-patch content-type quirk and watches of custom objects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.kube_calls import send, status_of

MERGE = "application/merge-patch+json"
RUNAI = "scheduling.run.ai"


def queue(name: str, gpu_quota: int, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": f"{RUNAI}/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def podgroup(name: str, queue_name: str, min_member: int) -> dict[str, Any]:
    return {"apiVersion": f"{RUNAI}/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"minMember": min_member, "queue": queue_name}, "status": {"phase": "ignored-on-create"}}


async def test_queue_crud_and_merge_patch_quirk(crd: client.CustomObjectsApi) -> None:
    created = await crd.create_cluster_custom_object(RUNAI, "v2", "queues", queue("team-a", 4, "root"))
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    listed = await crd.list_cluster_custom_object(RUNAI, "v2", "queues")
    assert listed["kind"] == "QueueList" and [q["metadata"]["name"] for q in listed["items"]] == ["team-a"]
    assert listed["metadata"]["resourceVersion"]

    # Quirk: a dict body defaults to application/json-patch+json, which needs a list of operations.
    with pytest.raises(ApiException) as quirk:
        await crd.patch_cluster_custom_object(RUNAI, "v2", "queues", "team-a", {"spec": {"priority": 5}})
    assert quirk.value.status == 400 and MERGE in status_of(quirk.value)["message"]

    patched = await send(crd.patch_cluster_custom_object, RUNAI, "v2", "queues", "team-a",
                                                    {"spec": {"resources": {"gpu": {"quota": 6}}}},
                                                    _content_type=MERGE)
    assert patched["spec"]["resources"]["gpu"] == {"quota": 6, "limit": -1, "overQuotaWeight": 1}
    assert patched["metadata"]["generation"] == 2
    ops = [{"op": "replace", "path": "/spec/parentQueue", "value": "other"}]
    assert (await crd.patch_cluster_custom_object(RUNAI, "v2", "queues", "team-a", ops))["spec"][
        "parentQueue"] == "other"
    with pytest.raises(ApiException) as strategic:
        await send(crd.patch_cluster_custom_object, RUNAI, "v2", "queues", "team-a", {"spec": {}},
                                              _content_type="application/strategic-merge-patch+json")
    assert strategic.value.status == 415

    status = await crd.delete_cluster_custom_object(RUNAI, "v2", "queues", "team-a")
    assert status["kind"] == "Status" and status["status"] == "Success"
    with pytest.raises(ApiException) as gone:
        await crd.get_cluster_custom_object(RUNAI, "v2", "queues", "team-a")
    assert gone.value.status == 404
    assert status_of(gone.value)["message"] == 'queues.scheduling.run.ai "team-a" not found'


async def test_podgroup_status_subresource_and_namespacing(crd: client.CustomObjectsApi) -> None:
    created = await crd.create_namespaced_custom_object(RUNAI, "v2alpha2", "team-a", "podgroups",
                                                        podgroup("pg1", "team-a", 2))
    assert "status" not in created, "status is ignored on create when the status subresource is enabled"
    condition = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                 "message": "2 pods need 8 GPUs"}
    with_status = await send(crd.patch_namespaced_custom_object_status,
        RUNAI, "v2alpha2", "team-a", "podgroups", "pg1",
        {"spec": {"minMember": 9}, "status": {"schedulingConditions": [condition]}}, _content_type=MERGE)
    assert with_status["status"]["schedulingConditions"] == [condition]
    assert with_status["spec"]["minMember"] == 2, "a /status write must not change spec"
    main = await send(crd.patch_namespaced_custom_object, RUNAI, "v2alpha2", "team-a", "podgroups", "pg1",
                                                    {"spec": {"minMember": 3}, "status": None}, _content_type=MERGE)
    assert main["spec"]["minMember"] == 3 and main["status"]["schedulingConditions"] == [condition]
    everywhere = await crd.list_cluster_custom_object(RUNAI, "v2alpha2", "podgroups")
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in everywhere["items"]] == [("team-a", "pg1")]
    assert (await crd.list_namespaced_custom_object(RUNAI, "v2alpha2", "other", "podgroups"))["items"] == []


async def test_watch_custom_objects(crd: client.CustomObjectsApi) -> None:
    listed = await crd.list_cluster_custom_object(RUNAI, "v2", "queues")
    async with watch.Watch() as w:
        stream = w.stream(crd.list_cluster_custom_object, RUNAI, "v2", "queues",
                          resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=5)

        async def first_two() -> list[dict[str, Any]]:
            out = []
            async for event in stream:
                out.append(event)
                if len(out) == 2:
                    break
            return out

        task = asyncio.ensure_future(first_two())
        await asyncio.sleep(0.05)
        await crd.create_cluster_custom_object(RUNAI, "v2", "queues", queue("q1", 1))
        await crd.delete_cluster_custom_object(RUNAI, "v2", "queues", "q1")
        events = await asyncio.wait_for(task, 5)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "q1"), ("DELETED", "q1")]
    assert w.resource_version == events[1]["object"]["metadata"]["resourceVersion"]


async def test_topology_and_priority_class(crd: client.CustomObjectsApi, api: client.ApiClient) -> None:
    topology = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "dc"},
                "spec": {"levels": [{"nodeLabel": "topology.kubernetes.io/zone"},
                                    {"nodeLabel": "kubernetes.io/hostname"}]}}
    await crd.create_cluster_custom_object("kai.scheduler", "v1alpha1", "topologies", topology)
    got = await crd.get_cluster_custom_object("kai.scheduler", "v1alpha1", "topologies", "dc")
    assert got["spec"]["levels"][0]["nodeLabel"] == "topology.kubernetes.io/zone"
    sched = client.SchedulingV1Api(api)
    await sched.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name="train"), value=50))
    classes = await sched.list_priority_class()
    assert [(c.metadata.name, c.value) for c in classes.items] == [("train", 50)]
