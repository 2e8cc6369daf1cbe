"""List and watch contract: resourceVersion, NDJSON events, bookmarks, 410 Expired -> re-list, selectors,
paging, and filtered watches that turn selector crossings into ADDED/DELETED."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from kai_stream.connectors.simcluster import SimCluster
from tests.kube_calls import send, status_of

from .manifests import binding, node, pod


async def _collect(stream: Any, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    async def run() -> None:
        async for event in stream:
            events.append(event)
            if len(events) == count:
                return

    await asyncio.wait_for(run(), timeout)
    return events


async def test_watch_from_list_resource_version(v1: client.CoreV1Api) -> None:
    await send(v1.create_namespaced_pod, "default", pod("before"))
    listed = await v1.list_namespaced_pod("default")
    assert [p.metadata.name for p in listed.items] == ["before"]
    rv = listed.metadata.resource_version
    assert int(rv) >= int(listed.items[0].metadata.resource_version)

    async with watch.Watch() as w:
        stream = w.stream(v1.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5)
        task = asyncio.ensure_future(_collect(stream, 3))
        await asyncio.sleep(0.05)
        await send(v1.create_namespaced_pod, "default", pod("after"))
        await v1.patch_namespaced_pod("after", "default", {"metadata": {"labels": {"x": "1"}}})
        await v1.delete_namespaced_pod("after", "default")
        events = await task
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after")]
    versions = [int(e["object"].metadata.resource_version) for e in events]
    assert versions == sorted(versions) and versions[0] > int(rv)
    assert events[1]["object"].metadata.labels == {"x": "1"}


async def test_watch_without_resource_version_starts_with_current_objects(v1: client.CoreV1Api) -> None:
    for name in ("a", "b"):
        await send(v1.create_namespaced_pod, "default", pod(name))
    async with watch.Watch() as w:
        events = await _collect(w.stream(v1.list_namespaced_pod, "default", timeout_seconds=5), 2)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "a"), ("ADDED", "b")]


async def test_bookmarks_carry_the_current_resource_version(v1: client.CoreV1Api, sim: SimCluster) -> None:
    listed = await v1.list_namespaced_pod("default")
    await send(v1.create_node, node("elsewhere"))
    async with watch.Watch() as w:
        stream = w.stream(v1.list_namespaced_pod, "default", resource_version=listed.metadata.resource_version,
                          allow_watch_bookmarks=True, timeout_seconds=5)
        events = await _collect(stream, 1)
        assert events[0]["type"] == "BOOKMARK"
        bookmark_rv = events[0]["raw_object"]["metadata"]["resourceVersion"]
        assert int(bookmark_rv) == sim.store.resource_version > int(listed.metadata.resource_version)
        assert w.resource_version == bookmark_rv


async def test_no_bookmarks_unless_allowed(v1: client.CoreV1Api) -> None:
    async with watch.Watch() as w:
        events = [e async for e in w.stream(v1.list_namespaced_pod, "default", resource_version="1",
                                            timeout_seconds=1)]
    assert events == []


@pytest.mark.parametrize("sim_options", [{"history_limit": 3}])
async def test_too_old_resource_version_is_410_and_relist_recovers(v1: client.CoreV1Api) -> None:
    listed = await v1.list_namespaced_pod("default")
    old_rv = listed.metadata.resource_version
    for n in range(6):
        await send(v1.create_namespaced_pod, "default", pod(f"p{n}"))

    with pytest.raises(ApiException) as expired:
        async with watch.Watch() as w:
            async for _ in w.stream(v1.list_namespaced_pod, "default", resource_version=old_rv, timeout_seconds=2):
                pass
    assert expired.value.status == 410 and "Expired" in str(expired.value.reason)

    # Without timeout_seconds the client retries once from the same version, then gives up with 410 too.
    with pytest.raises(ApiException) as again:
        async with watch.Watch() as w:
            async for _ in w.stream(v1.list_namespaced_pod, "default", resource_version=old_rv):
                pass
    assert again.value.status == 410

    relisted = await v1.list_namespaced_pod("default")
    assert len(relisted.items) == 6
    async with watch.Watch() as w:
        stream = w.stream(v1.list_namespaced_pod, "default", resource_version=relisted.metadata.resource_version,
                          timeout_seconds=5)
        task = asyncio.ensure_future(_collect(stream, 1))
        await asyncio.sleep(0.05)
        await send(v1.create_namespaced_pod, "default", pod("fresh"))
        events = await task
    assert events[0]["type"] == "ADDED" and events[0]["object"].metadata.name == "fresh"


async def test_label_and_field_selectors(v1: client.CoreV1Api, sim: SimCluster) -> None:
    sim.load_objects([node("n1"), node("n2")])
    await send(v1.create_namespaced_pod, "default", pod("a", labels={"app": "train", "tier": "gold"}, node_name="n1"))
    await send(v1.create_namespaced_pod, "default", pod("b", labels={"app": "serve"}))
    await send(v1.create_namespaced_pod, "ml", pod("c", "ml", labels={"app": "train"}))

    async def names(**kwargs: Any) -> list[str]:
        found = await v1.list_pod_for_all_namespaces(**kwargs)
        return [p.metadata.name for p in found.items]

    assert await names(label_selector="app=train") == ["a", "c"]
    assert await names(label_selector="app!=train") == ["b"]
    assert await names(label_selector="app in (serve, other)") == ["b"]
    assert await names(label_selector="app notin (serve),tier") == ["a"]
    assert await names(label_selector="!tier") == ["b", "c"]
    assert await names(field_selector="spec.nodeName=n1") == ["a"]
    assert await names(field_selector="spec.nodeName=") == ["b", "c"]
    assert await names(field_selector="metadata.namespace=ml") == ["c"]
    assert await names(field_selector="metadata.name=b,status.phase=Pending") == ["b"]
    await sim.wait_until(lambda: sim.get("pods/default/a")["status"]["phase"] == "Running", timeout=3)
    assert await names(field_selector="status.phase!=Pending") == ["a"]
    assert await names(label_selector="app=train", field_selector="metadata.namespace!=ml") == ["a"]
    with pytest.raises(ApiException) as bad:
        await v1.list_namespaced_pod("default", field_selector="spec.priority=3")
    assert bad.value.status == 400 and "field label not supported" in status_of(bad.value)["message"]


async def test_filtered_watch_turns_selector_crossings_into_added_and_deleted(
    v1: client.CoreV1Api, sim: SimCluster
) -> None:
    sim.load_objects([node("n1")])
    await send(v1.create_namespaced_pod, "default", pod("w", annotations={"kai.scheduler/duration-seconds": "5"}))
    listed = await v1.list_namespaced_pod("default", field_selector="spec.nodeName=n1")
    assert listed.items == []
    async with watch.Watch() as w:
        stream = w.stream(v1.list_namespaced_pod, "default", field_selector="status.phase=Running",
                          resource_version=listed.metadata.resource_version, timeout_seconds=5)
        task = asyncio.ensure_future(_collect(stream, 2))
        await asyncio.sleep(0.05)
        await v1.create_namespaced_pod_binding("w", "default", binding("w", "n1"), _preload_content=False)
        events = await task
    # Leaving the selector is DELETED with the last matching content and the new resourceVersion.
    assert [(e["type"], e["object"].status.phase) for e in events] == [("ADDED", "Running"), ("DELETED", "Running")]
    assert events[1]["object"].metadata.resource_version == sim.get("pods/default/w")["metadata"]["resourceVersion"]
    assert sim.get("pods/default/w")["status"]["phase"] == "Succeeded"


async def test_list_paging_is_a_consistent_snapshot(v1: client.CoreV1Api) -> None:
    for n in range(5):
        await send(v1.create_namespaced_pod, "default", pod(f"p{n}"))
    first = await v1.list_namespaced_pod("default", limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3
    await send(v1.create_namespaced_pod, "default", pod("p9"))
    second = await v1.list_namespaced_pod("default", limit=2, _continue=first.metadata._continue)
    third = await v1.list_namespaced_pod("default", limit=2, _continue=second.metadata._continue)
    assert [p.metadata.name for p in [*second.items, *third.items]] == ["p2", "p3", "p4"]
    assert third.metadata._continue is None
    assert third.metadata.resource_version == first.metadata.resource_version


async def test_watch_all_namespaces_and_nodes(v1: client.CoreV1Api) -> None:
    listed = await v1.list_node()
    async with watch.Watch() as w:
        stream = w.stream(v1.list_node, resource_version=listed.metadata.resource_version, timeout_seconds=5)
        task = asyncio.ensure_future(_collect(stream, 2))
        await asyncio.sleep(0.05)
        await send(v1.create_node, node("n7"))
        await v1.patch_node_status("n7", {"status": {"allocatable": {"nvidia.com/gpu": "4"}}})
        events = await task
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED"]
    assert events[1]["object"].status.allocatable["nvidia.com/gpu"] == "4"
    assert events[1]["object"].status.capacity["nvidia.com/gpu"] == "8"


async def test_send_initial_events_ends_with_annotated_bookmark(v1: client.CoreV1Api, sim: SimCluster) -> None:
    await send(v1.create_namespaced_pod, "default", pod("i1"))
    async with watch.Watch() as w:
        stream = w.stream(v1.list_namespaced_pod, "default", send_initial_events=True,
                          resource_version_match="NotOlderThan", allow_watch_bookmarks=True, timeout_seconds=5)
        events = await _collect(stream, 2)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    marker = events[1]["raw_object"]["metadata"]
    assert marker["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(marker["resourceVersion"]) == sim.store.resource_version


async def test_stop_ends_open_watches(sim: SimCluster, v1: client.CoreV1Api) -> None:
    w = watch.Watch()
    stream = w.stream(v1.list_namespaced_pod, "default", timeout_seconds=60)
    reader = asyncio.ensure_future(_collect(stream, 10, timeout=30))
    await asyncio.sleep(0.1)
    assert sim.store.watcher_count() == 1
    await asyncio.wait_for(sim.stop(), 5)
    assert (await asyncio.wait_for(reader, 5)) == []
    await w.close()


@pytest.mark.parametrize("sim_options", [{"watch_timeout": 0.3}])
async def test_watch_forever_resumes_after_server_side_timeout(v1: client.CoreV1Api, sim: SimCluster) -> None:
    listed = await v1.list_namespaced_pod("default")
    async with watch.Watch() as w:
        stream = w.stream(v1.list_namespaced_pod, "default", resource_version=listed.metadata.resource_version)
        task = asyncio.ensure_future(_collect(stream, 2))
        await send(v1.create_namespaced_pod, "default", pod("early"))
        await asyncio.sleep(0.8)
        await send(v1.create_namespaced_pod, "default", pod("late"))
        events = await task
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "early"), ("ADDED", "late")]
