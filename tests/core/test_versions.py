"""Versioned observations: the fold ignores a pod or node observation not newer than the one it holds, so a
connector's re-list can never undo a bind or give a GPU twice."""

from __future__ import annotations

from typing import Any

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import BindRequested, NodeObserved, PodBound, PodObserved
from kai_stream.core.manifests import object_to_events
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply, fold


def _node(version: str, gpus: int = 1, uid: str = "node-uid") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "uid": uid, "resourceVersion": version},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "32Gi"}},
    }


def _pod(name: str, version: str, node: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": version,
            "labels": {"kai.scheduler/queue": "q"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            **({"nodeName": node} if node else {}),
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def _queue() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "q", "resourceVersion": "1"},
        "spec": {"resources": {"gpu": {"quota": -1}, "cpu": {"quota": -1}, "memory": {"quota": -1}}},
    }


def _observe(state: ClusterState, obj: dict[str, Any], ts: float) -> bool:
    changed = False
    for event in object_to_events(obj, ts=ts):
        changed = apply(state, event, state.offset + 1) or changed
    return changed


def _binds(state: ClusterState) -> list[BindRequested]:
    decisions = run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset, code_version="t")
    for decision in decisions:
        apply(state, decision)
    return [d for d in decisions if isinstance(d, BindRequested)]


def test_the_connector_reads_the_resource_version() -> None:
    [pod] = object_to_events(_pod("a", "41"), ts=1.0)
    [node] = object_to_events(_node("7"), ts=1.0)
    assert isinstance(pod, PodObserved) and pod.resource_version == 41
    assert isinstance(node, NodeObserved) and node.resource_version == 7
    [odd] = object_to_events(_pod("a", "not-a-number"), ts=1.0)
    assert isinstance(odd, PodObserved) and odd.resource_version is None


def test_a_stale_relist_never_undoes_a_bind() -> None:
    state = fold([])
    _observe(state, _queue(), 0.0)
    _observe(state, _node("5"), 0.0)
    _observe(state, _pod("a", "10"), 1.0)
    [bind] = _binds(state)
    bound = PodBound(
        event_id="bound-a", ts=2.0, decision_id=bind.decision_id, namespace="ns", name="a", uid="uid-a", node="n1"
    )
    apply(state, bound, state.offset + 1)
    assert state.pods["uid-a"].node_name == "n1"

    # the connector restarts; its re-list publishes the pod as it was before the bind (same or older version)
    for version in ("10", "9"):
        stale = object_to_events(_pod("a", version), ts=3.0)[0].model_copy(update={"event_id": f"relist-{version}"})
        assert apply(state, stale, state.offset + 1) is False
        assert state.pods["uid-a"].node_name == "n1"
    _observe(state, _pod("b", "12"), 3.0)
    assert _binds(state) == []  # the one GPU is taken: b is not given it as well

    _observe(state, _pod("a", "11", node="n1"), 4.0)
    assert state.pods["uid-a"].phase == "Running" and state.versions["pod/uid-a"] == 11


def test_a_stale_node_observation_is_ignored_and_a_recreated_node_is_not() -> None:
    state = fold([])
    _observe(state, _node("20", gpus=4), 0.0)
    assert not _observe(state, _node("19", gpus=8), 1.0)
    assert state.nodes["n1"].allocatable.gpu_milli == 4000
    assert _observe(state, _node("3", gpus=2, uid="recreated"), 2.0)
    assert state.nodes["n1"].allocatable.gpu_milli == 2000
    assert sorted(state.versions) == ["node/n1/recreated"]
