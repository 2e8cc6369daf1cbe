"""A job whose victims (evicted for it in an earlier cycle) are still releasing waits instead of evicting more."""

from __future__ import annotations

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import EvictionRequested, PodPending, stable_id
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply

from .harness import SCENARIOS, events_of


def _state(evicted_for: str | None) -> ClusterState:
    config = SchedulerConfig()
    state = ClusterState()
    for event in events_of((SCENARIOS / "reclaim-waiting.yaml").read_text(), config):
        apply(state, event, state.offset + 1)
    if evicted_for is not None:
        b4 = state.pod_by_key("ml", "b4")
        assert b4 is not None
        eviction = EvictionRequested(
            decision_id=stable_id("earlier", b4.uid),
            ts=0.0,
            input_offset=0,
            config_hash="",
            code_version="test",
            action="reclaim",
            namespace="ml",
            name="b4",
            uid=b4.uid,
            job="ml/b4",
            queue="qb",
            node=b4.node_name,
            preemptor=evicted_for,
        )
        apply(state, eviction, state.offset + 1)
    return state


def test_reclaimer_waits_for_its_victims() -> None:
    state = _state("ml/a2")
    made = run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset)
    a2 = [d for d in made if d.name == "a2"]
    assert [d.type for d in a2] == ["PodPending"]
    assert isinstance(a2[0], PodPending) and a2[0].code == "WaitingForReclaim"
    assert a2[0].details == {"releasing": "1"}
    # allocate pipelines the older a1 onto b4's releasing GPU; nobody evicts more while b4 is still releasing
    assert [(d.type, d.action) for d in made if d.name == "a1"] == [("PodPipelined", "allocate")]
    assert not [d for d in made if isinstance(d, EvictionRequested)]


def test_without_pending_evictions_both_reclaim() -> None:
    state = _state(None)
    made = run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset)
    assert sum(1 for d in made if isinstance(d, EvictionRequested)) == 2
