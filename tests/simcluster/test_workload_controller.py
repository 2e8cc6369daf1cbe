"""The simulated workload controller: which evicted pods come back pending, under which uid, and that writes
can be held (what `simulate --live` uses to decide in rounds)."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client

from kai_stream.connectors.simcluster import SimCluster
from kai_stream.emulation import LABEL_RECREATE, recreated_uid

from .manifests import node, pod


def _evict(name: str) -> client.V1Eviction:
    return client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace="default"))


async def test_labelled_pod_comes_back_pending_with_a_new_uid(v1: client.CoreV1Api, sim: SimCluster) -> None:
    sim.load_objects([node("n1"), pod("job-0", node_name="n1", labels={LABEL_RECREATE: "true"},
                                      annotations={"kai.scheduler/gpu-indices": "0"})])
    old = sim.get("pods/default/job-0")
    await v1.create_namespaced_pod_eviction("job-0", "default", _evict("job-0"))
    again = sim.get("pods/default/job-0")
    assert again["metadata"]["uid"] == recreated_uid(old["metadata"]["uid"])
    assert "nodeName" not in again["spec"] and again["status"]["phase"] == "Pending"
    assert again["metadata"]["creationTimestamp"] == old["metadata"]["creationTimestamp"]
    assert "kai.scheduler/gpu-indices" not in (again["metadata"].get("annotations") or {})


async def test_bare_pod_is_gone_unless_asked_for(v1: client.CoreV1Api, sim: SimCluster) -> None:
    sim.load_objects([node("n1"), pod("bare", node_name="n1"), pod("moved", node_name="n1"),
                      pod("pinned", node_name="n1", labels={LABEL_RECREATE: "false"})])
    uids = {name: sim.get(f"pods/default/{name}")["metadata"]["uid"] for name in ("bare", "moved", "pinned")}
    for name in uids:
        await v1.create_namespaced_pod_eviction(name, "default", _evict(name))
    assert sim.find("pods/default/bare") is None
    assert sim.controller.recreate(uids["moved"]) is not None
    assert sim.controller.recreate(uids["pinned"]) is None
    assert sim.get("pods/default/moved")["metadata"]["uid"] == recreated_uid(uids["moved"])
    assert sim.find("pods/default/pinned") is None
    assert sim.controller.recreate(uids["moved"]) is None


async def test_held_writes_wait_and_reads_go_on(v1: client.CoreV1Api, sim: SimCluster) -> None:
    sim.load_objects([node("n1"), pod("p", node_name="n1")])
    sim.hold_writes()
    eviction = asyncio.ensure_future(v1.create_namespaced_pod_eviction("p", "default", _evict("p")))
    await asyncio.sleep(0.2)
    assert (await v1.read_namespaced_pod("p", "default")).metadata.name == "p"
    assert not eviction.done() and sim.find("pods/default/p") is not None
    sim.release_writes()
    await asyncio.wait_for(eviction, 5)
    assert sim.find("pods/default/p") is None
