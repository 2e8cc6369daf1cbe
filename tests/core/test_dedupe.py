"""The fold drops an event whose id it has already folded (re-delivered or forged), within a bounded window."""

from __future__ import annotations

import pytest

from kai_stream.core import state as state_module
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindRequested,
    NodeObserved,
    NodeSpec,
    PodBound,
    PodObserved,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
    Tick,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply, fold

NODE = NodeSpec(name="n1", allocatable=Resources(gpu_milli=1000, cpu_milli=8000, memory=2**34))
QUEUE = QueueSpec(name="q", resources=QueueResources(gpu=QueueResource(quota=-1)))
PENDING = PodObserved(
    event_id="pod-a-v1",
    ts=1.0,
    pod=PodSpec(namespace="ns", name="a", uid="a", queue="q", requests=Resources(gpu_milli=1000)),
)


def _bound_state() -> ClusterState:
    state = fold(
        [
            NodeObserved(event_id="node", ts=0.0, node=NODE),
            QueueObserved(event_id="queue", ts=0.0, queue=QUEUE),
            PENDING,
        ]
    )
    decisions = run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset, code_version="t")
    bind = next(d for d in decisions if isinstance(d, BindRequested))
    apply(state, bind)
    apply(
        state,
        PodBound(
            event_id="bound-a", ts=2.0, decision_id=bind.decision_id, namespace="ns", name="a", uid="a", node="n1"
        ),
        state.offset + 1,
    )
    assert state.pods["a"].node_name == "n1"
    return state


def test_a_duplicate_event_id_is_a_no_op() -> None:
    state = _bound_state()
    offset = state.offset
    forged = PENDING.model_copy(update={"ts": 3.0})
    assert apply(state, forged, offset + 1) is False
    assert state.pods["a"].node_name == "n1" and state.pods["a"].phase == "Running"
    assert state.offset == offset + 1 and state.now == 2.0
    decisions = run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset, code_version="t")
    assert not [d for d in decisions if isinstance(d, BindRequested)]


def test_the_window_is_bounded_and_counted_in_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_module, "SEEN_IDS", 4)
    state = fold([Tick(event_id=f"t{i}", ts=float(i)) for i in range(10)])
    assert sorted(state.seen.ids) == ["t6", "t7", "t8", "t9"] and len(state.seen.order) == 4
    assert apply(state, Tick(event_id="t9", ts=20.0), state.offset + 1) is False
    assert apply(state, Tick(event_id="t0", ts=20.0), state.offset + 1) is True
    again = fold([Tick(event_id=f"t{i}", ts=float(i)) for i in range(10)])
    assert list(again.seen.order) == list(fold([Tick(event_id=f"t{i}", ts=float(i)) for i in range(10)]).seen.order)
