"""The request a job is ranked with in queue order (``Session.ranking_request``, read by the proportion plugin's
queue keys): what it offers now (``Session.job_request``, kept per job version), except inside a simulation.
Where that is read:

* an elastic job that placed part of its tasks is ranked again, within the cycle, with what it still offers, not
  with the request it was first ranked with (its whole first pass): KAI's ``GetTasksToAllocateInitResource`` is
  cached on the job and dropped on every task status change (``podgroup_info/job_info.go``
  ``invalidateTasksCache``), and ``PushJob`` re-ranks the job after its partial allocation;
* a reclaim simulation ranks the preemptor and the victims it puts back with the tasks each places, not with what
  each offers (a victim offers nothing: it has no pending task);
* a cycle on the kept snapshot, run again on the same state or after its decisions were folded, decides what a
  cold cycle decides, although the first cycle placed part of the job and moved its version.
"""

from __future__ import annotations

import copy

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.decide import decide
from kai_stream.core.events import (
    AnyEvent,
    BindRequested,
    Decision,
    EvictionRequested,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodPending,
    PodPipelined,
    PodSpec,
    Resources,
    dumps,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState

from .builders import GIB, fold, node_events, pending, queue, running


def _pod(name: str, queue: str, gpus: int, group: str | None = None) -> PodObserved:
    spec = PodSpec(
        namespace="t",
        name=name,
        uid=f"u-{name}",
        queue=queue,
        pod_group=group,
        requests=Resources(gpu_milli=gpus * 1000, cpu_milli=1000, memory=GIB),
        priority_class="train",
        created=1.0,
    )
    return PodObserved(event_id=f"p-{name}", ts=0.0, pod=spec)


def _elastic_state() -> ClusterState:
    """4 GPUs. Queue a (deserved 3.5 GPUs): elastic job j, minMember 2 of three 1-GPU pods (its first pass offers
    2 GPUs, the next 1). Queue b (deserved 2 GPUs): k, one 2-GPU pod. a goes first (share 2/3.5 against b's 2/2)
    and places j's first pass; ranked again with the 1 GPU j still offers, a stays within (2 + 1 <= 3.5) and goes
    first, so j-2 is placed and k finds no room; ranked with j's first pass (2 GPUs) a would go over its deserved
    quota (2 + 2 > 3.5), b would go next and k would take the last two GPUs."""
    events: list[AnyEvent] = node_events(1, 4)
    events += [queue("a", gpu_quota=3500), queue("b", gpu_quota=2000)]
    group = PodGroupSpec(namespace="t", name="j", queue="a", min_member=2, priority_class="train", created=1.0)
    events.append(PodGroupObserved(event_id="g-j", ts=0.0, pod_group=group))
    events += [_pod(f"j-{i}", "a", 1, group="j") for i in range(3)]
    events.append(_pod("k", "b", 2))
    return fold(events)


def _reclaim_state() -> ClusterState:
    """2 GPUs, both held by queue b's running 1-GPU pods; queue a has one pending 1-GPU pod. No deserved quota:
    each queue's fair share is 1 GPU, so b is over it and a may reclaim one pod. In the simulation (run-2
    evicted) a is ranked with pend-0's GPU, b with the GPU run-2 would take back: both go over their deserved 0,
    and a's share with its job (1) is below b's (2), so a goes first and takes the freed GPU. Ranked with what
    run-2's job offers (nothing: it has no pending task) b would stay within its deserved quota and go first,
    run-2 would take its GPU back, and nothing would be reclaimed."""
    events: list[AnyEvent] = node_events(1, 2)
    events += [queue("a", gpu_quota=0), queue("b", gpu_quota=0)]
    events += [running(1, "b", "n00", 0, "train"), running(2, "b", "n00", 1, "train")]
    events.append(pending(0, 10, "a", 1, "train"))
    return fold(events)


def _step(state: ClusterState) -> list[Decision]:
    linked, _ = decide(state, SchedulerConfig(), pool="default", head="")
    return [decision for decision, _ in linked]


def _outcome(decisions: list[Decision]) -> list[tuple[str, str, str | None]]:
    out: list[tuple[str, str, str | None]] = []
    for d in decisions:
        if isinstance(d, PodPending):
            out.append(("PodPending", d.name, d.code))
        elif isinstance(d, BindRequested | PodPipelined | EvictionRequested):
            out.append((type(d).__name__, d.name, None))
    return out


def test_a_partly_placed_elastic_job_is_ranked_again_with_what_it_still_offers() -> None:
    made = _outcome(_step(_elastic_state()))
    assert made == [
        ("BindRequested", "j-0", None),
        ("BindRequested", "j-1", None),
        ("BindRequested", "j-2", None),
        ("PodPending", "k", "NoNodeFits"),
    ]


def test_a_reclaim_simulation_ranks_the_victims_with_the_tasks_it_puts_back() -> None:
    made = _outcome(_step(_reclaim_state()))
    assert made == [("EvictionRequested", "run-2", None), ("PodPipelined", "pend-0", None)]


def _cold(state: ClusterState) -> list[bytes]:
    made = run_cycle(copy.deepcopy(state), SchedulerConfig(), pool="default", input_offset=state.offset, reuse=False)
    return [dumps(d) for d in made]


def _kept(state: ClusterState) -> list[bytes]:
    made = run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset)
    return [dumps(d) for d in made]


def test_a_cycle_on_the_kept_snapshot_ranks_as_a_cold_one() -> None:
    for state in (_elastic_state(), _reclaim_state()):
        cold = _cold(state)
        first = _kept(state)
        assert first == cold
        assert _kept(state) == first, "the same state again, on the snapshot the first cycle parked"
        before = state.derived.parked["default"]
        _step(state)
        after = _cold(state)
        assert _kept(state) == after
        assert state.derived.parked["default"] is before, "the snapshot was kept, not rebuilt"
