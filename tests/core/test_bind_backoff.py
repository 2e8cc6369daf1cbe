"""A pod whose bind failed is held for a back-off counted in event time, growing per failure in a row, capped;
meanwhile it is pending with reason ``BindBackoff``; a bind that succeeds resets the count; replay stays exact."""

from __future__ import annotations

import itertools

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    AnyEvent,
    BindFailed,
    BindRequested,
    Decision,
    NodeObserved,
    NodeSpec,
    PodBound,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodPending,
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

CONFIG = SchedulerConfig(bind_backoff_s=2.0, bind_backoff_max_s=10.0)
NODE = NodeSpec(name="n1", allocatable=Resources(gpu_milli=4000, cpu_milli=8000, memory=2**34))
QUEUE = QueueSpec(name="q", resources=QueueResources(gpu=QueueResource(quota=-1)))


def _pod(name: str, group: str | None = None) -> PodObserved:
    spec = PodSpec(namespace="ns", name=name, uid=name, queue="q", requests=Resources(gpu_milli=1000), pod_group=group)
    return PodObserved(event_id=f"pod-{name}", ts=1.0, pod=spec)


def _start(*pods: PodObserved, extra: tuple[AnyEvent, ...] = ()) -> ClusterState:
    return fold(
        [NodeObserved(event_id="node", ts=0.0, node=NODE), QueueObserved(event_id="queue", ts=0.0, queue=QUEUE), *extra,
         *pods]
    )


def _cycle(state: ClusterState, config: SchedulerConfig = CONFIG) -> list[Decision]:
    decisions = run_cycle(state, config, pool="default", input_offset=state.offset, code_version="t")
    for decision in decisions:
        apply(state, decision)
    return decisions


def _binds(decisions: list[Decision]) -> list[str]:
    return sorted(d.name for d in decisions if isinstance(d, BindRequested))


def _fail(state: ClusterState, bind: BindRequested, ts: float, n: int, error: str = "403 Forbidden") -> None:
    failed = BindFailed(
        event_id=f"fail-{bind.uid}-{n}", ts=ts, decision_id=bind.decision_id, namespace=bind.namespace,
        name=bind.name, uid=bind.uid, node=bind.node, error=error,
    )
    assert apply(state, failed, state.offset + 1)


def _tick(state: ClusterState, ts: float) -> None:
    apply(state, Tick(event_id=f"tick-{ts}", ts=ts), state.offset + 1)


def test_a_refused_bind_is_retried_only_after_a_back_off_that_doubles_up_to_the_cap() -> None:
    state = _start(_pod("a"))
    tried_at: list[float] = []
    failed_at = 0.0
    for n, now in enumerate(x / 2 for x in range(2, 120)):
        _tick(state, now)
        decisions = _cycle(state)
        binds = [d for d in decisions if isinstance(d, BindRequested)]
        if binds:
            tried_at.append(now)
            failed_at = now
            _fail(state, binds[0], now, n)
        elif tried_at:
            pending = [d for d in decisions if isinstance(d, PodPending)]
            if pending:
                assert pending[0].code == "BindBackoff"
                count = len(tried_at)
                assert f"failed {count} time(s) in a row, last: 403 Forbidden" in pending[0].reason
                assert f"next try at ts {failed_at + min(2.0 * 2 ** (count - 1), 10.0):.3f}" in pending[0].reason
    gaps = [b - a for a, b in itertools.pairwise(tried_at)]
    assert tried_at[0] == 1.0 and gaps == [2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0]
    assert state.bind_failures["a"].count == 8


def test_the_back_off_reason_is_given_once_and_the_pod_is_not_decided_meanwhile() -> None:
    state = _start(_pod("a"))
    _tick(state, 1.0)
    _fail(state, next(d for d in _cycle(state) if isinstance(d, BindRequested)), 1.0, 0)
    first = _cycle(state)
    assert [(type(d).__name__, getattr(d, "code", "")) for d in first] == [("PodPending", "BindBackoff")]
    for ts in (1.5, 2.0, 2.9):
        _tick(state, ts)
        assert _cycle(state) == []
    _tick(state, 3.0)
    assert _binds(_cycle(state)) == ["a"]


def test_a_successful_bind_resets_the_count_and_other_pods_are_not_held() -> None:
    state = _start(_pod("a"), _pod("b"))
    _tick(state, 1.0)
    decisions = _cycle(state)
    assert _binds(decisions) == ["a", "b"]
    bind_a = next(d for d in decisions if isinstance(d, BindRequested) and d.name == "a")
    _fail(state, bind_a, 1.0, 0)
    _tick(state, 3.0)
    retry = next(d for d in _cycle(state) if isinstance(d, BindRequested))
    bound = PodBound(
        event_id="bound-a", ts=3.5, decision_id=retry.decision_id, namespace="ns", name="a", uid="a", node="n1"
    )
    apply(state, bound, state.offset + 1)
    assert "a" not in state.bind_failures


def test_a_gang_with_a_held_pod_is_held_whole() -> None:
    group = PodGroupObserved(
        event_id="pg", ts=0.0, pod_group=PodGroupSpec(namespace="ns", name="g", queue="q", min_member=2)
    )
    state = _start(_pod("g-0", "g"), _pod("g-1", "g"), extra=(group,))
    _tick(state, 1.0)
    decisions = _cycle(state)
    assert _binds(decisions) == ["g-0", "g-1"]
    _fail(state, next(d for d in decisions if isinstance(d, BindRequested) and d.name == "g-0"), 1.0, 0)
    held = _cycle(state)
    assert not _binds(held)
    assert [getattr(d, "code", "") for d in held if isinstance(d, PodPending) and d.name == "g-0"] == ["BindBackoff"]
    _tick(state, 3.0)
    assert _binds(_cycle(state)) == ["g-0"]


def test_the_back_off_is_a_function_of_the_events_alone() -> None:
    def run() -> list[bytes]:
        state = _start(_pod("a"))
        out: list[bytes] = []
        for n, now in enumerate((1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 11.0)):
            _tick(state, now)
            decisions = _cycle(state)
            out.extend(d.model_dump_json().encode() for d in decisions)
            for bind in (d for d in decisions if isinstance(d, BindRequested)):
                _fail(state, bind, now, n)
        return out

    assert run() == run()
