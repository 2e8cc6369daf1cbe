"""What the connector and the binder rely on, asserted against the simulated cluster and a real kube-apiserver
with the same test bodies: list/watch from a resourceVersion, bookmarks, 410 Expired and re-list, pods/binding
201 then 409, PodScheduled, the eviction API with and without grace, status patches, merge patches on custom
resources, label and field selectors. KWOK plays the kubelets on the real server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.kube_calls import send, status_of

from .conftest import SIM_HISTORY, Server

pytestmark = pytest.mark.apiserver

MERGE = "application/merge-patch+json"


def _binding(name: str, node_name: str) -> client.V1Binding:
    return client.V1Binding(metadata=client.V1ObjectMeta(name=name),
                            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node_name))


async def _collect(stream: Any, count: int, timeout: float = 10.0, until: str | None = None) -> list[dict[str, Any]]:
    """Up to ``count`` events, or fewer when one of type ``until`` arrives."""
    events: list[dict[str, Any]] = []

    async def run() -> None:
        async for event in stream:
            events.append(event)
            if len(events) == count or event["type"] == until:
                return

    await asyncio.wait_for(run(), timeout)
    return events


async def test_watch_from_list_resource_version(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    await server.pod("before")
    listed = await v1.list_namespaced_pod(ns)
    assert [p.metadata.name for p in listed.items] == ["before"]
    rv = listed.metadata.resource_version
    async with watch.Watch() as w:
        stream = w.stream(v1.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=10)
        task = asyncio.ensure_future(_collect(stream, 4, until="DELETED"))
        await asyncio.sleep(0.2)
        await server.pod("after")
        await v1.patch_namespaced_pod("after", ns, {"metadata": {"labels": {"x": "1"}}})
        await v1.delete_namespaced_pod("after", ns)
        events = await task
    assert [(e["type"], e["object"].metadata.name) for e in events[:2]] == [("ADDED", "after"), ("MODIFIED", "after")]
    assert events[-1]["type"] == "DELETED"
    # kube-apiserver first writes deletionTimestamp (a MODIFIED) even with grace 0; the simulator deletes at once.
    between = events[2:-1]
    assert all(e["type"] == "MODIFIED" and e["object"].metadata.deletion_timestamp for e in between)
    assert len(between) == (1 if server.sim is None else 0)
    versions = [int(e["object"].metadata.resource_version) for e in events]
    assert versions == sorted(versions) and versions[0] > int(rv)
    assert events[1]["object"].metadata.labels == {"x": "1"}


async def test_bookmarks_carry_the_current_resource_version(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    listed = await v1.list_namespaced_pod(ns)
    await server.add_node("elsewhere")
    async with watch.Watch() as w:
        stream = w.stream(v1.list_namespaced_pod, ns, resource_version=listed.metadata.resource_version,
                          allow_watch_bookmarks=True, timeout_seconds=4)
        events = await _collect(stream, 1)
    # The simulator sends one every bookmark_interval; kube-apiserver may send none within a short watch here.
    if server.sim is not None:
        assert [e["type"] for e in events] == ["BOOKMARK"]
    for event in events:
        assert event["type"] == "BOOKMARK"
        assert int(event["raw_object"]["metadata"]["resourceVersion"]) >= int(listed.metadata.resource_version)


async def test_no_bookmarks_unless_allowed(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    listed = await v1.list_namespaced_pod(ns)
    async with watch.Watch() as w:
        events = [e async for e in w.stream(v1.list_namespaced_pod, ns, timeout_seconds=3,
                                            resource_version=listed.metadata.resource_version)]
    assert events == []


async def _expired_resource_version(server: Server) -> str:
    """A resourceVersion the simulator's bounded history has dropped."""
    listed = await server.v1.list_namespaced_pod(server.namespace)
    for n in range(SIM_HISTORY + 1):
        await server.pod(f"filler-{n}")
    return str(listed.metadata.resource_version)


async def test_too_old_resource_version_is_410_on_the_simulator_and_relist_recovers(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    if server.sim is not None:
        # Not provoked on kube-apiserver here: a watch from resourceVersion 1, even after an etcd compaction
        # (ControlPlane.compact_etcd), was served by the watch cache without a 410.
        old_rv = await _expired_resource_version(server)
        with pytest.raises(ApiException) as expired:
            async with watch.Watch() as w:
                async for _ in w.stream(v1.list_namespaced_pod, ns, resource_version=old_rv, timeout_seconds=3):
                    pass
        assert expired.value.status == 410 and "Expired" in str(expired.value.reason)

    relisted = await v1.list_namespaced_pod(ns)
    async with watch.Watch() as w:
        stream = w.stream(v1.list_namespaced_pod, ns, resource_version=relisted.metadata.resource_version,
                          timeout_seconds=10)
        task = asyncio.ensure_future(_collect(stream, 1))
        await asyncio.sleep(0.2)
        await server.pod("fresh")
        events = await task
    assert events[0]["type"] == "ADDED" and events[0]["object"].metadata.name == "fresh"


async def test_binding_201_then_409_and_404_and_pod_scheduled(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    n1, n2 = await server.add_node("n1"), await server.add_node("n2")
    created = await server.pod("b1")
    assert created.status.phase == "Pending"

    response = await send(v1.create_namespaced_pod_binding, "b1", ns, _binding("b1", n1), _preload_content=False)
    assert response.status == 201
    body = json.loads(await response.read())
    assert (body["kind"], body["status"]) == ("Status", "Success")
    bound = await v1.read_namespaced_pod("b1", ns)
    assert bound.spec.node_name == n1
    assert [c.status for c in bound.status.conditions or [] if c.type == "PodScheduled"] == ["True"]

    already = await send(v1.create_namespaced_pod_binding, "b1", ns, _binding("b1", n2), _preload_content=False)
    assert already.status == 409
    status = json.loads(await already.read())
    assert status["reason"] == "Conflict" and f'already assigned to node "{n1}"' in status["message"]

    missing = await send(v1.create_namespaced_pod_binding, "ghost", ns, _binding("ghost", n1), _preload_content=False)
    assert missing.status == 404 and json.loads(await missing.read())["reason"] == "NotFound"

    async def is_running() -> bool:
        pod = await server.find_pod("b1")
        return pod is not None and pod.status.phase == "Running"

    await server.until(is_running, "b1 Running on its node", timeout=60)


async def test_binding_preconditions_on_uid(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    n1 = await server.add_node("n1")
    await server.pod("u")
    wrong = client.V1Binding(metadata=client.V1ObjectMeta(name="u", uid="00000000-0000-0000-0000-000000000000"),
                             target=client.V1ObjectReference(api_version="v1", kind="Node", name=n1))
    refused = await send(v1.create_namespaced_pod_binding, "u", ns, wrong, _preload_content=False)
    assert refused.status == 409
    assert (await v1.read_namespaced_pod("u", ns)).spec.node_name is None


async def test_eviction_of_a_running_pod(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    n1 = await server.add_node("n1")
    await server.pod("victim")
    await v1.create_namespaced_pod_binding("victim", ns, _binding("victim", n1), _preload_content=False)

    async def running() -> bool:
        pod = await server.find_pod("victim")
        return pod is not None and pod.status.phase == "Running"

    await server.until(running, "victim Running", timeout=60)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="victim", namespace=ns))
    await v1.create_namespaced_pod_eviction("victim", ns, eviction)
    await server.until(lambda: _gone(server, "victim"), "victim gone", timeout=60)
    with pytest.raises(ApiException) as missing:
        await v1.create_namespaced_pod_eviction("victim", ns, eviction)
    assert missing.value.status == 404


async def _gone(server: Server, name: str) -> bool:
    return await server.find_pod(name) is None


async def test_graceful_eviction_keeps_the_pod_terminating_for_its_grace_period(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    n1 = await server.add_node("n1")
    await server.pod("slow", grace_s=3)
    await v1.create_namespaced_pod_binding("slow", ns, _binding("slow", n1), _preload_content=False)

    async def running() -> bool:
        pod = await server.find_pod("slow")
        return pod is not None and pod.status.phase == "Running"

    await server.until(running, "slow Running", timeout=60)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="slow", namespace=ns))
    await v1.create_namespaced_pod_eviction("slow", ns, eviction)
    terminating = await v1.read_namespaced_pod("slow", ns)
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 3
    refused = await send(v1.create_namespaced_pod_binding, "slow", ns, _binding("slow", n1), _preload_content=False)
    assert refused.status == 409
    await asyncio.sleep(1.0)
    assert await server.find_pod("slow") is not None, "removed before its grace period ended"
    await server.until(lambda: _gone(server, "slow"), "slow removed after its grace period", timeout=60)


async def test_status_patch_sets_pod_scheduled_false_and_leaves_metadata(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    await server.pod("s", labels={"keep": "me"})
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "queue team-a is over quota"}
    updated = await v1.patch_namespaced_pod_status(
        "s", ns, {"metadata": {"labels": {"ignored": "1"}}, "status": {"conditions": [condition]}})
    scheduled = [c for c in updated.status.conditions if c.type == "PodScheduled"]
    assert [(c.status, c.reason, c.message) for c in scheduled] == [
        ("False", "Unschedulable", "queue team-a is over quota")]
    if server.sim is not None:  # kube-apiserver keeps label changes sent to /status; the binder sends none
        assert updated.metadata.labels == {"keep": "me"}, "a /status write must not change metadata"
    other = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    merged = await v1.patch_namespaced_pod_status("s", ns, {"status": {"conditions": [other]}})
    assert {c.type for c in merged.status.conditions} >= {"PodScheduled", "DisruptionTarget"}, \
        "a strategic merge patch merges conditions by type"
    ignored = await v1.patch_namespaced_pod("s", ns, {"status": {"phase": "Failed"}})
    assert ignored.status.phase == "Pending", "the main resource ignores status"


async def test_pod_spec_node_name_is_set_only_by_binding(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    n1 = await server.add_node("n1")
    await server.pod("im")
    with pytest.raises(ApiException) as refused:
        await v1.patch_namespaced_pod("im", ns, {"spec": {"nodeName": n1}})
    assert refused.value.status == 422


async def test_merge_patches_and_status_on_custom_resources(server: Server) -> None:
    custom, ns = server.custom, server.namespace
    queue_name = server.name("q")
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue_name},
             "spec": {"resources": {"gpu": {"quota": 4, "overQuotaWeight": 1, "limit": -1}}}}
    await custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", queue)
    patched = await send(custom.patch_cluster_custom_object,
        "scheduling.run.ai", "v2", "queues", queue_name,
        {"spec": {"resources": {"gpu": {"quota": 8}}}}, _content_type=MERGE)
    assert patched["spec"]["resources"]["gpu"] == {"quota": 8, "overQuotaWeight": 1, "limit": -1}
    with pytest.raises(ApiException) as strategic:
        await send(custom.patch_cluster_custom_object,
            "scheduling.run.ai", "v2", "queues", queue_name, {"spec": {"priority": 1}},
            _content_type="application/strategic-merge-patch+json")
    assert strategic.value.status == 415

    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": "pg", "namespace": ns},
             "spec": {"minMember": 2, "queue": queue_name}, "status": {"phase": "ignored"}}
    created = await custom.create_namespaced_custom_object("scheduling.run.ai", "v2alpha2", ns, "podgroups", group)
    assert created.get("status", {}).get("phase") is None, "create ignores status when /status is a subresource"
    conditions = {"status": {"schedulingConditions": [
        {"type": "UnschedulableOnNodePool", "nodePool": "default", "reason": "Unschedulable", "message": "m"}]}}
    with_status = await send(custom.patch_namespaced_custom_object_status,
        "scheduling.run.ai", "v2alpha2", ns, "podgroups", "pg", conditions, _content_type=MERGE)
    assert with_status["status"]["schedulingConditions"][0]["type"] == "UnschedulableOnNodePool"
    spec_via_status = await send(custom.patch_namespaced_custom_object_status,
        "scheduling.run.ai", "v2alpha2", ns, "podgroups", "pg", {"spec": {"minMember": 5}}, _content_type=MERGE)
    assert spec_via_status["spec"]["minMember"] == 2, "a /status write must not change spec"
    listed = await custom.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", ns, "podgroups")
    assert [item["metadata"]["name"] for item in listed["items"]] == ["pg"]


async def test_label_and_field_selectors(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    n1 = await server.add_node("n1")
    await server.pod("a", labels={"app": "train", "tier": "gold"})
    await v1.create_namespaced_pod_binding("a", ns, _binding("a", n1), _preload_content=False)
    await server.pod("b", labels={"app": "serve"})
    await server.pod("c", labels={"app": "train"})

    async def names(**kwargs: Any) -> list[str]:
        found = await v1.list_namespaced_pod(ns, **kwargs)
        return sorted(p.metadata.name for p in found.items)

    assert await names(label_selector="app=train") == ["a", "c"]
    assert await names(label_selector="app!=train") == ["b"]
    assert await names(label_selector="app in (serve, other)") == ["b"]
    assert await names(label_selector="app notin (serve),tier") == ["a"]
    assert await names(label_selector="!tier") == ["b", "c"]
    assert await names(field_selector=f"spec.nodeName={n1}") == ["a"]
    assert await names(field_selector="spec.nodeName=") == ["b", "c"]
    assert await names(field_selector="metadata.name=b,status.phase=Pending") == ["b"]
    all_namespaces = await v1.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={ns}")
    assert sorted(p.metadata.name for p in all_namespaces.items) == ["a", "b", "c"]

    async def a_running() -> bool:
        return await names(field_selector="status.phase=Running") == ["a"]

    await server.until(a_running, "a Running", timeout=60)
    assert await names(field_selector="status.phase!=Pending") == ["a"]
    with pytest.raises(ApiException) as bad:
        await v1.list_namespaced_pod(ns, field_selector="spec.priority=3")
    assert bad.value.status == 400 and "field label not supported" in status_of(bad.value)["message"]


async def test_filtered_watch_turns_selector_crossings_into_added(server: Server) -> None:
    v1, ns = server.v1, server.namespace
    n1 = await server.add_node("n1")
    await server.pod("w")
    listed = await v1.list_namespaced_pod(ns, field_selector=f"spec.nodeName={n1}")
    assert listed.items == []
    async with watch.Watch() as w:
        stream = w.stream(v1.list_namespaced_pod, ns, field_selector=f"spec.nodeName={n1}",
                          resource_version=listed.metadata.resource_version, timeout_seconds=10)
        task = asyncio.ensure_future(_collect(stream, 1))
        await asyncio.sleep(0.2)
        await v1.create_namespaced_pod_binding("w", ns, _binding("w", n1), _preload_content=False)
        events = await task
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "w")]
    assert events[0]["object"].spec.node_name == n1


async def test_priority_admission_sets_spec_priority_from_the_priority_class(server: Server) -> None:
    """Both servers copy a stored PriorityClass's value into spec.priority. Where they differ (the simulator is
    lenient): kube-apiserver refuses a pod naming a class it does not have and gives a pod without a class
    priority 0; the simulator accepts the first and leaves both without spec.priority, and the scheduler then
    reads its built-in classes (its default class for a pod without one)."""
    v1, ns = server.v1, server.namespace
    scheduling = client.SchedulingV1Api(server.api)
    high = server.name("high")
    await send(
        scheduling.create_priority_class,
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": high}, "value": 200},
    )
    try:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"priorityClassName": high, "containers": [{"name": "c", "image": "busybox"}]}}
        created = await send(v1.create_namespaced_pod, ns, body)
        assert (created.spec.priority, created.spec.preemption_policy) == (200, "PreemptLowerPriority")
        plain = await server.pod("plain")
        assert plain.spec.priority == (None if server.sim is not None else 0)
        unknown = {**body, "metadata": {"name": "u"}, "spec": {**body["spec"], "priorityClassName": server.name("x")}}
        if server.sim is not None:
            assert (await send(v1.create_namespaced_pod, ns, unknown)).spec.priority is None
        else:
            with pytest.raises(ApiException) as refused:
                await send(v1.create_namespaced_pod, ns, unknown)
            assert refused.value.status == 403
    finally:
        await scheduling.delete_priority_class(high)
