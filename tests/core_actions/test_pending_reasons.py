"""Pending reasons name the constraint that binds, with its numbers: capacity is not reported as fair share.

One test (at least) per constraint: capacity (``InsufficientCapacity``: a full pool, a gang larger than the pool,
a pool with no nodes, capacity held by non-preemptible pods), fair share (``NotEnoughOverQuotaShare``), deserved
quota (``OverDeservedNonPreemptible``), limit (``QueueOverLimit``), min-runtime protection
(``MinRuntimeProtected``), gang size (``GangIncomplete``, job and subgroup), topology (``NoNodeFits`` in KAI's
words) and health (``Unhealthy``). Each case runs the default actions to a fixed point and reads the last
``PodPending`` of a pod.
"""

from __future__ import annotations

from typing import cast

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    AnyEvent,
    GpuDevice,
    GpuHealthObserved,
    ObservedEvent,
    PodPending,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
)
from kai_stream.core.manifests import load_scenario
from kai_stream.simulate import simulate

from .builders import gang, node_events, pending, running
from .harness import SCENARIOS


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


def test_a_gang_with_fewer_pods_than_its_min_member_says_how_many() -> None:
    """A gang of minMember 3 of which two pods exist (the third is left out)."""
    events = [*node_events(1, 4), _queue("qa"), *gang(1, 10, "qa", 3, 1, "train")[:-1]]
    reason = _last_pending(events, "g1-0")
    assert reason.code == "GangIncomplete"
    assert reason.reason == "job t/g1 has 2 pods, needs minMember 3"


def test_a_subgroup_with_fewer_pods_than_its_min_member_names_it() -> None:
    from .test_subgroups import BASE, _pod

    text = BASE.replace("GPUS", "4") + "".join(
        _pod(n, g, i) for i, (n, g) in enumerate([("w0", "workers"), ("l0", "leader"), ("l1", "leader")], 1)
    )
    reason = _last_pending(cast(list[AnyEvent], load_scenario(text)), "w0")
    assert reason.code == "GangIncomplete"
    assert reason.reason == "job ml/pg subgroup workers has 1 pods, needs minMember 2"
    assert reason.details == {"subGroup": "workers", "pods": "1", "minMember": "2"}


def test_a_required_topology_level_no_domain_holds_says_what_the_best_domain_can() -> None:
    """Scenario topology-one-rack (racks r1: n1, n2 with one GPU taken, and r2: n3, n4; 2 GPUs per node), its
    rack-bound gang grown to 5 pods: no rack holds it, r2 could place 4."""
    docs = (SCENARIOS / "topology-one-rack.yaml").read_text().split("\n---\n")
    docs = [d for d in docs if "kind: Expect" not in d]
    gang_pod = next(d for d in docs if "name: gang-3" in d)
    docs.append(gang_pod.replace("gang-3", "gang-4").replace("00:00:13Z", "00:00:14Z"))
    text = "\n---\n".join(docs).replace("minMember: 4", "minMember: 5")
    reason = _last_pending(cast(list[AnyEvent], load_scenario(text)), "gang-0")
    assert reason.code == "NoNodeFits"
    assert reason.reason == (
        "topology cluster-topology, requirement kai.scheduler/rack couldn't be satisfied for job <ml/gang>: it needs"
        " 5 pods (5 GPU); of 2 kai.scheduler/rack domains, the best (r2) can allocate only 4 of 5 required pods,"
        " 4 GPU free"
    )


def test_a_pod_that_only_unhealthy_gpus_could_hold_names_them() -> None:
    health = GpuHealthObserved(
        event_id="h0",
        ts=0.0,
        node="n00",
        gpus=(GpuDevice(index=0, uuid="GPU-a"), GpuDevice(index=1, uuid="GPU-b", healthy=False, reason="fatal XID 79")),
    )
    events = [
        *node_events(1, 2),
        health,
        _queue("qa"),
        running(1, "qa", "n00", 0, "train"),
        pending(1, 10, "qa", 1, "train"),
    ]
    reason = _last_pending(events, "pend-1")
    assert reason.code == "Unhealthy"
    assert reason.reason == ("no node fits the pod (UnhealthyGPU: 1); unhealthy GPUs: n00 GPU 1 (GPU-b): fatal XID 79")
