"""KubeApplier against the simulated cluster over HTTP (kubernetes-asyncio): binds, evictions, the
autoscaler signal, idempotency, 409 races and retries."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from kai_stream.binder.kube import KubeApplier, Pod, RetryPolicy
from kai_stream.connectors.simcluster import SimCluster, api_client
from kai_stream.core.events import BindFailed, EvictionFailed, PodBound, PodEvicted
from kai_stream.observability import BINDER_RETRIES

from .builders import bind, evict, node, pending, pod, pod_group
from .proxy import Proxy

FAST = RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=0.05)


@pytest.fixture
async def applier(api: client.ApiClient) -> KubeApplier:
    return KubeApplier(api, FAST)


def _posts(sim: SimCluster, name: str) -> list[int]:
    return [b.code for b in sim.bindings if b.name == name]


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return dict(c)
    return None


async def test_bind_sets_node_and_gpu_indices_then_is_idempotent(sim: SimCluster, applier: KubeApplier) -> None:
    await sim.create(node("n1"))
    p = await sim.create(pod("p1"))
    decision = bind(p, "n1", gpus=(2, 5))
    outcome = await applier.bind(decision)
    assert isinstance(outcome, PodBound) and not outcome.already
    assert outcome.gpu_indices == (2, 5) and outcome.decision_id == decision.decision_id
    stored = sim.get("pods/team-a/p1")
    assert stored["spec"]["nodeName"] == "n1"
    assert stored["metadata"]["annotations"]["kai.scheduler/gpu-indices"] == "2,5"
    again = await applier.bind(decision)
    assert isinstance(again, PodBound) and again.already
    assert again.event_id == outcome.event_id
    assert _posts(sim, "p1") == [201]


async def test_bind_refuses_pods_bound_elsewhere_missing_or_replaced(sim: SimCluster, applier: KubeApplier) -> None:
    await sim.create(node("n1"))
    await sim.create(node("n2"))
    p = await sim.create(pod("p1"))
    assert isinstance(await applier.bind(bind(p, "n1")), PodBound)
    elsewhere = await applier.bind(bind(p, "n2", offset=9))
    assert isinstance(elsewhere, BindFailed) and "already bound to node n1" in elsewhere.error
    ghost = {"metadata": {"name": "ghost", "namespace": "team-a", "uid": "u-ghost"}}
    missing = await applier.bind(bind(ghost, "n1"))
    assert isinstance(missing, BindFailed) and "not found" in missing.error
    q = await sim.create(pod("p2"))
    replaced = await applier.bind(bind({**q, "metadata": {**q["metadata"], "uid": "old-uid"}}, "n1"))
    assert isinstance(replaced, BindFailed) and "replaced" in replaced.error
    assert _posts(sim, "p1") == [201] and _posts(sim, "p2") == []


async def test_409_race_on_the_decided_node_counts_as_done(
    sim: SimCluster, api: client.ApiClient, applier: KubeApplier, monkeypatch: pytest.MonkeyPatch
) -> None:
    await sim.create(node("n1"))
    p = await sim.create(pod("p1"))
    original = applier._read_pod
    reads = 0

    async def read_then_someone_binds(namespace: str, name: str) -> Pod | None:
        nonlocal reads
        reads += 1
        current = await original(namespace, name)
        if reads == 1:
            body = client.V1Binding(metadata=client.V1ObjectMeta(name=name),
                                    target=client.V1ObjectReference(api_version="v1", kind="Node", name="n1"))
            await client.CoreV1Api(api).create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
        return current

    monkeypatch.setattr(applier, "_read_pod", read_then_someone_binds)
    outcome = await applier.bind(bind(p, "n1"))
    assert isinstance(outcome, PodBound) and outcome.already
    assert _posts(sim, "p1") == [201, 409]


async def test_fresh_bind_posts_without_reading_and_409_404_read_after(
    sim: SimCluster, applier: KubeApplier, monkeypatch: pytest.MonkeyPatch
) -> None:
    await sim.create(node("n1"))
    await sim.create(node("n2"))
    p = await sim.create(pod("p1"))
    original = applier._read_pod
    reads: list[str] = []

    async def counted(namespace: str, name: str) -> Pod | None:
        reads.append(name)
        return await original(namespace, name)

    monkeypatch.setattr(applier, "_read_pod", counted)
    outcome = await applier.bind(bind(p, "n1", gpus=(3,)), check_first=False)
    assert isinstance(outcome, PodBound) and not outcome.already and reads == []
    assert sim.get("pods/team-a/p1")["metadata"]["annotations"]["kai.scheduler/gpu-indices"] == "3"
    again = await applier.bind(bind(p, "n1", gpus=(3,)), check_first=False)
    assert isinstance(again, PodBound) and again.already and again.event_id == outcome.event_id
    elsewhere = await applier.bind(bind(p, "n2", offset=7), check_first=False)
    assert isinstance(elsewhere, BindFailed) and "already bound to node n1" in elsewhere.error
    ghost = {"metadata": {"name": "ghost", "namespace": "team-a", "uid": "u-ghost"}}
    missing = await applier.bind(bind(ghost, "n1"), check_first=False)
    assert isinstance(missing, BindFailed) and "not found" in missing.error
    assert reads == ["p1", "p1", "ghost"]  # read only after a refused POST
    assert _posts(sim, "p1") == [201, 409, 409] and sim.get("pods/team-a/p1")["spec"]["nodeName"] == "n1"


async def test_evict_and_evict_again(sim: SimCluster, applier: KubeApplier) -> None:
    await sim.create(node("n1"))
    p = await sim.create(pod("p1"))
    assert isinstance(await applier.bind(bind(p, "n1")), PodBound)
    first = await applier.evict(evict(p))
    assert isinstance(first, PodEvicted) and not first.already
    await sim.wait_until(lambda: sim.find("pods/team-a/p1") is None, timeout=5)
    second = await applier.evict(evict(p))
    assert isinstance(second, PodEvicted) and second.already
    assert [e.code for e in sim.evictions] == [201]


async def test_unschedulable_signal_on_pod_and_podgroup_cleared_by_bind(sim: SimCluster, applier: KubeApplier) -> None:
    await sim.create(node("n1"))
    await sim.create(pod_group("g1"))
    p = await sim.create(pod("p1", group="g1"))
    await applier.mark_unschedulable(pending(p, "0/1 nodes have 8 free GPUs"))
    stored = sim.get("pods/team-a/p1")
    cond = _condition(stored, "PodScheduled")
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", "0/1 nodes have 8 free GPUs")
    group = sim.get("podgroups/team-a/g1")
    [sched] = group["status"]["schedulingConditions"]
    assert sched["type"] == "UnschedulableOnNodePool" and sched["status"] == "True"
    assert sched["message"] == "0/1 nodes have 8 free GPUs" and sched["nodePool"] == "default"
    version = (stored["metadata"]["resourceVersion"], group["metadata"]["resourceVersion"])
    await applier.mark_unschedulable(pending(p, "0/1 nodes have 8 free GPUs", offset=5))
    stored, group = sim.get("pods/team-a/p1"), sim.get("podgroups/team-a/g1")
    assert (stored["metadata"]["resourceVersion"], group["metadata"]["resourceVersion"]) == version
    assert isinstance(await applier.bind(bind(p, "n1", offset=6)), PodBound)
    bound = sim.get("pods/team-a/p1")
    assert _condition(bound, "PodScheduled")["status"] == "True"  # type: ignore[index]
    assert sim.get("podgroups/team-a/g1")["status"].get("schedulingConditions", []) == []
    await applier.mark_unschedulable(pending(p, "late pending", offset=7))
    assert _condition(sim.get("pods/team-a/p1"), "PodScheduled")["status"] == "True"  # type: ignore[index]


async def test_fresh_bind_clears_the_group_named_by_the_decisions_job(sim: SimCluster, api: client.ApiClient) -> None:
    await sim.create(node("n1"))
    await sim.create(pod_group("g1"))
    p = await sim.create(pod("p1", group="g1"))
    await KubeApplier(api).mark_unschedulable(pending(p, "0/1 nodes have 8 free GPUs"))
    assert sim.get("podgroups/team-a/g1")["status"]["schedulingConditions"]
    decision = bind(p, "n1", offset=6).model_copy(update={"job": "team-a/g1"})
    assert isinstance(await KubeApplier(api).bind(decision, check_first=False), PodBound)  # knows nothing marked
    assert sim.get("podgroups/team-a/g1")["status"].get("schedulingConditions", []) == []


async def test_5xx_is_retried_with_backoff_then_gives_up(sim: SimCluster, flaky: Proxy) -> None:
    await sim.create(node("n1"))
    p1, p2 = await sim.create(pod("p1")), await sim.create(pod("p2"))
    before = BINDER_RETRIES.labels(operation="bind", reason="503")._value.get()
    async with api_client(flaky.url) as api:
        applier = KubeApplier(api, FAST)
        flaky.failures = 2
        assert isinstance(await applier.bind(bind(p1, "n1")), PodBound)
        assert BINDER_RETRIES.labels(operation="bind", reason="503")._value.get() == before + 2
        flaky.failures = 100
        failed = await applier.bind(bind(p2, "n1"))
        assert isinstance(failed, BindFailed) and "503" in failed.error
        flaky.path, flaky.failures, flaky.status = "/eviction", 100, 500
        gave_up = await applier.evict(evict(p1))
        assert isinstance(gave_up, EvictionFailed) and "500" in gave_up.error
    assert _posts(sim, "p1") == [201] and _posts(sim, "p2") == []
