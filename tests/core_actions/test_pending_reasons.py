"""Pending reasons name the constraint that binds, with its numbers: capacity is not reported as fair share.

Each case runs the default actions to a fixed point and reads the last ``PodPending`` of a pod.
"""

from __future__ import annotations

from typing import cast

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    AnyEvent,
    ObservedEvent,
    PodPending,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
)
from kai_stream.simulate import simulate

from .builders import gang, node_events, pending, running


def _queue(name: str, deserved: float = -1, limit: float = -1, parent: str | None = None) -> QueueObserved:
    def gpu(v: float) -> int:
        return -1 if v == -1 else round(v * 1000)

    res = QueueResources(gpu=QueueResource(quota=gpu(deserved), limit=gpu(limit)), cpu=QueueResource(quota=-1))
    res = res.model_copy(update={"memory": QueueResource(quota=-1)})
    return QueueObserved(event_id=f"q-{name}", ts=0.0, queue=QueueSpec(name=name, parent=parent, resources=res))


def _last_pending(events: list[AnyEvent], pod: str) -> PodPending:
    result = simulate(cast(list[ObservedEvent], events), SchedulerConfig(), cycles=20)
    assert result.settled
    found = [d for d in result.decisions if isinstance(d, PodPending) and d.name == pod]
    assert found, f"{pod} got no pending reason"
    return found[-1]


def test_one_unlimited_queue_on_a_full_node_is_capacity() -> None:
    running_pods = [running(i, "qa", "n00", i, "train") for i in range(4)]
    reason = _last_pending(
        [*node_events(1, 4), _queue("qa"), *running_pods, pending(1, 10, "qa", 1, "train")], "pend-1"
    )
    assert reason.code == "InsufficientCapacity"
    assert reason.reason == "job t/pend-1 needs 1 GPU; queue qa already holds 4; the pool has 4 GPU"
    assert reason.details["pool_total"] == "4" and reason.details["queue_allocated"] == "4"


def test_a_gang_larger_than_the_pool_is_capacity() -> None:
    reason = _last_pending([*node_events(1, 4), _queue("qa"), *gang(1, 10, "qa", 6, 1, "train")], "g1-0")
    assert reason.code == "InsufficientCapacity"
    assert reason.reason == "job t/g1 needs 6 GPU; the pool has 4 GPU"


def test_a_pool_with_no_nodes_is_capacity() -> None:
    reason = _last_pending([_queue("qa"), pending(1, 10, "qa", 1, "train")], "pend-1")
    assert reason.code == "InsufficientCapacity"
    assert reason.reason == "job t/pend-1 needs 1 GPU and pool default has no nodes"


def test_a_gang_behind_a_non_preemptible_pod_is_capacity() -> None:
    events = [
        *node_events(1, 4),
        _queue("qa", deserved=2),
        _queue("qb", deserved=2),
        running(1, "qb", "n00", 0, "build"),
        *gang(1, 10, "qa", 4, 1, "train"),
    ]
    reason = _last_pending(events, "g1-0")
    assert reason.code == "InsufficientCapacity"
    assert reason.reason == (
        "job t/g1 needs 4 GPU; the pool has 4 GPU, 1 of them held by non-preemptible pods of other queues"
    )
    assert reason.details["held_non_preemptible_elsewhere"] == "1"


def test_fair_share_binds_when_other_queues_hold_their_share() -> None:
    events = [
        *node_events(1, 4),
        _queue("qa", deserved=2),
        _queue("qb", deserved=2),
        *[running(i, "qa", "n00", i, "train") for i in range(2)],
        *[running(i, "qb", "n00", i, "train") for i in range(2, 4)],
        pending(1, 10, "qa", 1, "train"),
        pending(2, 11, "qb", 1, "train"),
    ]
    reason = _last_pending(events, "pend-1")
    assert reason.code == "NotEnoughOverQuotaShare"
    assert reason.reason == (
        "job t/pend-1 does not fit and queue qa would exceed its fair share by reclaiming:"
        " it holds 2 + the job's 1 > fair share 2 GPU"
    )


def test_a_non_preemptible_job_over_its_departments_deserved_names_the_department() -> None:
    events = [
        *node_events(1, 4),
        _queue("dept", deserved=1),
        _queue("qa", deserved=2, parent="dept"),
        pending(1, 10, "qa", 2, "build"),
    ]
    reason = _last_pending(events, "pend-1")
    assert reason.code == "OverDeservedNonPreemptible"
    assert reason.reason == (
        "non-preemptible job over queue dept deserved gpu 1000: non-preemptible allocated 0 + request 2000"
    )


def test_a_job_over_its_queue_limit_says_so_with_numbers() -> None:
    events = [*node_events(1, 4), _queue("qa", limit=1), pending(1, 10, "qa", 2, "train")]
    reason = _last_pending(events, "pend-1")
    assert reason.code == "QueueOverLimit"
    assert reason.reason == "queue qa gpu limit 1000 < allocated 0 + request 2000"


def test_a_victim_protected_by_min_runtime_says_so() -> None:
    from .harness import run
    from .test_scenarios import T0

    result, _ = run("min-runtime.yaml", tick=T0 + 12 * 60)
    reason = [d for d in result.decisions if isinstance(d, PodPending) and d.name == "a1"][-1]
    assert reason.code == "MinRuntimeProtected"
    assert reason.reason == (
        "job ml/a1 does not fit; queue qb is over its fair share (1 > 0 GPU) but its job ml/b1 is protected by"
        " reclaimMinRuntime 300 s until 2026-01-01T00:15:00Z"
    )
    assert reason.details["victim_job"] == "ml/b1"
