"""Job aging (``SchedulerConfig.job_aging``; not in KAI, off unless configured): waiting raises a job in its queue.

A job is *waiting* while none of its pods runs or is placed; it has waited ``ctx.ts - job.created`` (event time,
so replay decides alike). Two effects, both inside its leaf queue (across queues, fair share decides):

* order: its job-order priority is its priority plus one per ``interval_s`` waited, at most ``max_boost``; the
  key goes before the priority plugin's, which then breaks ties. Running jobs get no boost, so victim order is
  unchanged.
* hold: a job that has waited ``hold_after_s``, could fit on some node of the pool were it empty, and was just
  refused for room (``NoNodeFits``, ``InsufficientCapacity``) holds back every job behind it in its queue's order
  that wants the same kind of resource (GPUs, or none): they stay pending with ``HeldForStarvingJob`` until it is
  placed, so the room that frees up is not taken by a stream of smaller jobs.

The job key depends on time, not only on the job's tasks, so the session's per-job key memos are dropped when a
session opens with this plugin on.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kai_stream.core.events import PendingCode
from kai_stream.core.scheduler.framework.hooks import SortKey
from kai_stream.core.scheduler.framework.info import PENDING, UNIT, JobInfo, NodeInfo, TaskInfo

if TYPE_CHECKING:
    from kai_stream.core.config import JobAging
    from kai_stream.core.scheduler.framework.session import Session

ROOM: frozenset[str] = frozenset({"NoNodeFits", "InsufficientCapacity"})
"""Pending codes that say "no room now" (a quota refusal does not hold anyone back)."""
HELD: PendingCode = "HeldForStarvingJob"


def waited(job: JobInfo, now: float) -> float | None:
    """How long ``job`` has waited at ``now``, or None when one of its pods runs or is placed."""
    if any(t.status != PENDING for t in job.tasks):
        return None
    return max(0.0, now - job.created)


def boost(params: JobAging, wait: float | None) -> int:
    if wait is None:
        return 0
    return min(params.max_boost, int(wait // params.interval_s))


def next_change(params: JobAging, job: JobInfo, after: float) -> float:
    """The earliest time after ``after`` at which waiting changes what ``job`` gets: its next boost step or its
    hold (``after`` itself, just past, once it holds: the hold's reason counts the seconds waited); ``inf`` for a
    job that is not waiting."""
    wait = waited(job, after)
    if wait is None:
        return math.inf
    hold = params.hold_after_s
    if hold is not None and wait >= hold:
        return math.nextafter(after, math.inf)
    found = job.created + hold if hold is not None else math.inf
    steps = boost(params, wait)
    if steps < params.max_boost:
        step = job.created + (steps + 1) * params.interval_s
        while step > after and boost(params, math.nextafter(step, -math.inf) - job.created) > steps:
            step = math.nextafter(step, -math.inf)
        found = min(found, max(step, math.nextafter(after, math.inf)))
    return found


def _could_fit(task: TaskInfo, node: NodeInfo, session: Session) -> bool:
    """Whether ``task`` would fit on ``node`` were nothing running there."""
    if not node.ready or node.unschedulable:
        return False
    gpu = session.task_request(task)[0]
    if gpu > node.gpu_count * UNIT or task.cpu > node.cpu_alloc or task.mem > node.mem_alloc:
        return False
    return session.hooks.predicate(task, node) is None


def _wants_gpu(job: JobInfo) -> bool:
    return any(t.gpu_whole or t.gpu_frac or t.gpu_mem_mib for t in job.tasks)


class AgingPlugin:
    name = "aging"

    def __init__(self) -> None:
        self.session: Session | None = None
        self.boosts: dict[str, int] = {}
        self.starving: dict[str, list[JobInfo]] = {}
        """Per leaf queue: its jobs waiting past ``hold_after_s`` that could fit the pool, in job order."""

    def on_session_open(self, session: Session) -> None:
        params = session.config.job_aging
        if params is None:
            return
        self.session = session
        now = session.ctx.ts
        self.boosts = {}
        for job in session.jobs:
            job.key_at = -1
        for job in session.pending_jobs:
            self.boosts[job.key] = boost(params, waited(job, now))
        session.hooks.job_keys.insert(0, self._key)
        hold = params.hold_after_s
        if hold is None:
            return
        self.starving = {}
        for job in session.pending_jobs:
            wait = waited(job, now)
            if job.queue is None or wait is None or wait < hold:
                continue
            if all(any(_could_fit(t, n, session) for n in session.nodes) for t in job.tasks):
                self.starving.setdefault(job.queue.name, []).append(job)
        if self.starving:
            for jobs in self.starving.values():
                jobs.sort(key=session.job_key)
            session.hooks.job_checks.append(self._hold)

    def _key(self, job: JobInfo) -> SortKey:
        return (-(job.priority + self.boosts.get(job.key, 0)),)

    def _hold(self, job: JobInfo, request: list[int]) -> tuple[PendingCode, str] | None:
        ssn = self.session
        if ssn is None or job.queue is None:
            return None
        heads = self.starving.get(job.queue.name)
        if not heads:
            return None
        key = ssn.job_key(job)
        gpu = _wants_gpu(job)
        for head in heads:
            if head is job or ssn.job_key(head) >= key:
                return None
            pending = ssn.pending_of(head)
            info = ssn.pending.get(pending[0].uid) if pending else None
            if info is None or info.code not in ROOM or _wants_gpu(head) != gpu:
                continue
            params = ssn.config.job_aging
            assert params is not None
            return HELD, (
                f"job {head.key} has waited {ssn.ctx.ts - head.created:.0f} s (jobAging.holdAfter "
                f"{params.hold_after_s:.0f} s) and finds no room: jobs behind it in queue {job.queue.name} wait "
                f"until it is placed"
            )
        return None
