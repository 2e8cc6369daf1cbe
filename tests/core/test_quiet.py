"""``core.quiet``: the next deadline of each time rule as the cycle reads it, and ``idle`` agreeing with the cycle."""

from __future__ import annotations

import math

from kai_stream.core.config import JobAging, SchedulerConfig, UsageParams
from kai_stream.core.events import (
    BindFailed,
    NodeObserved,
    NodeSpec,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodSpec,
    QueueObserved,
    QueueSpec,
    Resources,
    Tick,
)
from kai_stream.core.quiet import idle, next_deadline
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply

POOL = "default"


def _fold(state: ClusterState, *events: object) -> None:
    for event in events:
        apply(state, event, state.offset + 1)  # type: ignore[arg-type]


def _cluster(**queue: float) -> ClusterState:
    state = ClusterState()
    node = NodeSpec(name="n1", allocatable=Resources(gpu_milli=8000, cpu_milli=64000, memory=2**36))
    _fold(
        state,
        NodeObserved(event_id="n1", ts=0.0, node=node),
        QueueObserved(event_id="q", ts=0.0, queue=QueueSpec(name="q", **queue)),
    )
    return state


def _pod(name: str, *, gpus: int = 1, group: str | None = None, node: str | None = None, started: float | None = None,
         created: float = 0.0) -> PodObserved:
    spec = PodSpec(namespace="ns", name=name, uid=f"u-{name}", queue="q", pod_group=group,
                   requests=Resources(gpu_milli=1000 * gpus), node_name=node,
                   phase="Running" if node else "Pending", started=started, created=created)
    return PodObserved(event_id=f"seen-{name}", ts=max(created, started or 0.0), pod=spec)


def _tick(state: ClusterState, ts: float) -> None:
    _fold(state, Tick(event_id=f"t{ts}", ts=ts, pool=POOL))


def test_a_running_job_is_protected_until_its_start_plus_each_min_runtime() -> None:
    state = _cluster(preempt_min_runtime_s=60.0)
    _fold(state, _pod("a", node="n1", started=10.0))
    config = SchedulerConfig(reclaim_min_runtime_s=200.0)
    _tick(state, 20.0)
    assert next_deadline(state, config, pool=POOL) == 70.0
    _tick(state, 70.0)
    assert next_deadline(state, config, pool=POOL) == 210.0
    _tick(state, 210.0)
    assert next_deadline(state, config, pool=POOL) == math.inf
    assert next_deadline(state, SchedulerConfig(), pool=POOL) == math.inf


def test_a_gang_below_its_minimum_turns_stale_after_the_grace_and_idle_follows() -> None:
    state = _cluster()
    group = PodGroupSpec(namespace="ns", name="g", queue="q", min_member=2)
    gang = _pod("g-0", group="g", node="n1", started=5.0)
    _fold(state, PodGroupObserved(event_id="g", ts=0.0, pod_group=group), gang)
    config = SchedulerConfig(stale_gang_grace_s=60.0)
    assert state.group_changed["ns/g"] == 5.0
    assert next_deadline(state, config, pool=POOL) == 65.0
    assert idle(state, config, pool=POOL) and run_cycle(state, config, pool=POOL, input_offset=state.offset) == []
    _tick(state, 65.0)
    assert not idle(state, config, pool=POOL)
    assert [d.type for d in run_cycle(state, config, pool=POOL, input_offset=state.offset)] == ["EvictionRequested"]


def test_a_waiting_job_changes_at_each_aging_step_then_every_moment_once_it_holds() -> None:
    state = _cluster()
    _fold(state, _pod("big", gpus=16, created=0.0))
    config = SchedulerConfig(job_aging=JobAging(interval_s=600.0, max_boost=2, hold_after_s=1500.0))
    _tick(state, 100.0)
    assert next_deadline(state, config, pool=POOL) == 600.0
    _tick(state, 1200.0)
    assert next_deadline(state, config, pool=POOL) == 1500.0
    _tick(state, 1500.0)
    assert next_deadline(state, config, pool=POOL) == math.nextafter(1500.0, math.inf)
    unheld = SchedulerConfig(job_aging=JobAging(interval_s=600.0, max_boost=2, hold_after_s=None))
    assert next_deadline(state, unheld, pool=POOL) == math.inf


def test_a_failed_bind_backs_off_and_a_usage_window_moves_with_time() -> None:
    state = _cluster()
    _fold(state, _pod("p"))
    _fold(state, BindFailed(event_id="f", ts=30.0, decision_id="d", namespace="ns", name="p", uid="u-p", node="n1",
                            error="webhook"))
    config = SchedulerConfig(bind_backoff_s=4.0)
    assert next_deadline(state, config, pool=POOL) == 34.0
    timed = SchedulerConfig(usage_params=UsageParams(window_size_s=3600.0))
    assert next_deadline(state, timed, pool=POOL) == math.nextafter(30.0, math.inf)
