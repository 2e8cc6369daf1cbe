"""Deleting the PodGroup of a running gang does not make it a stale gang (KAI's stale-gang eviction walks the
PodGroups: a pod without one belongs to no gang); the same gang with its group, one pod short, is evicted."""

from __future__ import annotations

from pathlib import Path

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import EvictionRequested, PodGroupRemoved, PodRemoved, Tick, stable_id
from kai_stream.core.manifests import load_scenario
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply, fold

from .harness import split

SCENARIO = Path(__file__).parent / "scenarios" / "stale-gang.yaml"


def _gang_of_two() -> ClusterState:
    """The stale-gang scenario's group 'g' with minMember 2 and its two pods running: not stale."""
    text, _ = split(SCENARIO.read_text())
    return fold(load_scenario(text.replace("minMember: 3", "minMember: 2")))


def _later(state: ClusterState, ts: float) -> list[EvictionRequested]:
    apply(state, Tick(event_id=stable_id("tick", str(ts)), ts=ts, pool="default"), state.offset + 1)
    decisions = run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset)
    for decision in decisions:
        apply(state, decision)
    return [d for d in decisions if isinstance(d, EvictionRequested)]


def test_running_pods_of_a_deleted_pod_group_are_not_evicted_as_a_stale_gang() -> None:
    state = _gang_of_two()
    assert _later(state, 10.0) == []
    apply(state, PodGroupRemoved(event_id="gone", ts=20.0, namespace="ml", name="g"), state.offset + 1)
    assert _later(state, 30.0) == []
    assert _later(state, 500.0) == [], "a gang without its PodGroup was evicted as stale"
    assert all(pod.node_name == "n1" for pod in state.pods.values())


def test_the_same_gang_with_its_group_one_pod_short_is_evicted() -> None:
    state = _gang_of_two()
    gone = state.pod_by_key("ml", "g-1")
    assert gone is not None
    apply(state, PodRemoved(event_id="rm", ts=20.0, namespace="ml", name="g-1", uid=gone.uid), state.offset + 1)
    assert _later(state, 30.0) == []
    evicted = _later(state, 81.0)
    assert [d.name for d in evicted] == ["g-0"]
    assert "below minMember 2" in evicted[0].reason
