"""preempt: inside one queue, a pending job evicts strictly lower-priority preemptible jobs of that queue.

Per pending job (queue order), victims are running preemptible jobs of the same leaf queue whose priority is
strictly lower and that the victim scopes allow (min-runtime: a protected elastic job gives only its surplus
pods), taken in reverse job order (lowest priority, then newest, first), elastic jobs' surplus pods before the gang
cores of their priority (``units_in_victim_order``). A victim set is accepted when the
job's whole gang is placed within its queue's limits (and, for a non-preemptible job, its deserved quota).
Once a search fails, jobs of the same shape and priority in the same queue are not searched again in this
action run. A non-preemptible job over the deserved quota of its queue's ancestry by its non-preemptible pods
alone fails without searching: its victims are preemptible, so no eviction lowers what that check reads
(``_refused_whatever_evicted``), and every placement of a try would be refused.
"""

from __future__ import annotations

from collections.abc import Iterator

from kai_stream.core.scheduler.actions._common.fairness import queue_details
from kai_stream.core.scheduler.actions._common.solver import SearchSpec, awaiting, free_gpu, search
from kai_stream.core.scheduler.actions._common.victims import (
    VictimLists,
    VictimUnit,
    running,
    units_in_victim_order,
    victim_judges,
)
from kai_stream.core.scheduler.framework.info import JobInfo, QueueInfo, TaskInfo
from kai_stream.core.scheduler.framework.ordering import JobsByQueue
from kai_stream.core.scheduler.framework.session import Session

NAME = "preempt"


class _Preempt:
    def __init__(self, session: Session) -> None:
        self.ssn = session
        self._pool_free: int | None = None
        self._gave_up: set[tuple[object, ...]] = set()
        self._floor: dict[str, int] = {}
        self.lists = VictimLists(session.hooks.job_key, victim_judges(session, NAME))
        self._listed: set[str] = set()
        """Queues whose victim list was read in this action run (``victims``)."""

    @property
    def pool_free(self) -> int:
        """The pool's free GPU when the action began: computed at the first search, before which nothing was
        placed or evicted."""
        if self._pool_free is None:
            self._pool_free = free_gpu(self.ssn)
        return self._pool_free

    def victims(self, preemptor: JobInfo) -> Iterator[VictimUnit] | None:
        """The victim units in the order they are taken (read as the search takes them); None when there is no
        victim job."""
        queue = preemptor.queue
        assert queue is not None
        floor = self._floor.get(queue.name)
        priority = preemptor.priority
        if floor is None:
            floor = self._floor[queue.name] = _lowest_priority(queue, priority)
        if priority <= floor:
            return None
        key = self.lists.key(preemptor, queue)
        self._listed.add(queue.name)
        jobs, start, surplus = self.lists.live(queue, key)
        for first in range(start, len(jobs)):
            job = jobs[first]
            if job.priority < priority and job is not preemptor:
                break
        else:
            return None

        def keep(j: JobInfo) -> bool:
            return j.priority < priority and j is not preemptor

        return units_in_victim_order(jobs, surplus, first, self.lists.runs(key, jobs), keep)

    def _has_victims(self, preemptor: JobInfo) -> bool:
        """``victims(preemptor) is not None``, without sorting the queue's victim list when no search of this run
        read it yet (no victim scope registered): nothing of the queue changed in this run before its first search,
        so every preemptible job running in it is in that list, from its start."""
        queue = preemptor.queue
        assert queue is not None
        if self.lists.judges is not None or queue.name in self._listed:
            return self.victims(preemptor) is not None
        priority = preemptor.priority
        return any(j.priority < priority and j.preemptible and running(j) for j in queue.jobs)

    def try_job(self, job: JobInfo) -> None:
        ssn = self.ssn
        pending = ssn.pending_of(job)
        queue = job.queue
        if not pending or queue is None:
            return
        if awaiting(ssn, job):
            return
        shape = (tuple(t.shape for t in pending), job.min_member, queue.name, job.priority, job.topology)
        if shape in self._gave_up:
            return
        if _refused_whatever_evicted(ssn, job):
            if self._has_victims(job):
                self._gave_up.add(shape)
            return
        units = self.victims(job)
        if units is None:
            return

        def candidates() -> Iterator[VictimUnit]:
            return units

        base = {**queue_details("queue", queue), "preemptor_priority": str(job.priority)}

        def details(task: TaskInfo) -> dict[str, str]:
            return {**base, "victim_priority": str(task.job.priority)}

        spec = SearchSpec(
            action=NAME,
            preemptor=job,
            candidates=candidates,
            validate=lambda taken: True,
            details=details,
            reason=f"preempted by higher-priority {job.key} (priority {job.priority}) in queue {queue.name}",
            pool_free_gpu=self.pool_free,
            preemptor_first=True,
            fixed_candidates=True,
        )
        if not search(ssn, spec):
            self._gave_up.add(shape)


def _refused_whatever_evicted(session: Session, job: JobInfo) -> bool:
    """Whether the job checks refuse ``job`` for its non-preemptible pods over a deserved quota
    (``OverDeservedNonPreemptible``): what that check reads (the queues' non-preemptible allocations) no eviction of
    a preemptible victim changes, so it refuses every placement of the job a search would try."""
    refused = session.hooks.check_job(job, session.job_request(job))
    return refused is not None and refused[0] == "OverDeservedNonPreemptible"


def _lowest_priority(queue: QueueInfo, default: int) -> int:
    """The lowest priority of the queue's jobs: only a job above it can find a victim in the queue."""
    return min((j.priority for j in queue.jobs), default=default)


def _may_preempt(jobs: list[JobInfo]) -> list[JobInfo]:
    """``jobs`` less the queues where no pending job outranks the queue's lowest priority: each of their jobs would
    find no victim and change nothing when its turn came, so leaving out the whole queue keeps the order of the
    others."""
    top: dict[str, tuple[QueueInfo, int]] = {}
    for job in jobs:
        queue = job.queue
        assert queue is not None
        seen = top.get(queue.name)
        if seen is None or job.priority > seen[1]:
            top[queue.name] = (queue, job.priority)
    kept = {name for name, (queue, best) in top.items() if best > _lowest_priority(queue, best)}
    return [j for j in jobs if j.queue is not None and j.queue.name in kept]


def run(session: Session) -> None:
    jobs = _may_preempt([j for j in session.pending_jobs if j.queue is not None and session.pending_of(j)])
    if not jobs:
        return
    preempt = _Preempt(session)
    order = JobsByQueue(session, jobs)
    for job in order.in_order():
        preempt.try_job(job)
