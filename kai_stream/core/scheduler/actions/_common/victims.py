"""Victim units: what a victim search may take from a running job, one unit at a time.

An elastic job (more active pods than ``minMember``) first offers its surplus pods, newest first, each as its
own unit, so a search that needs little takes only pods above the minimum; then the rest of the job (its gang
core) as one unit, so a gang is never left partly running. In a job with subgroups the surplus pods are those
above each subgroup's minMember, taken from the subgroup most above its own each turn. A plain job is one unit.
Only pods that were running when the cycle started are offered (pods placed during this cycle are not victims),
but for reclaim, which also offers pods pipelined earlier in the session (``takeable``: KAI's victims are its
active-allocated pods, ``pod_status.activeAllocatedStatuses``; a pod nominated by an earlier cycle is left alone,
as giving up a nomination made before this cycle has no decision).
A job the victim scopes limit to its surplus (min-runtime) offers its surplus units only.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kai_stream.core.scheduler.framework.hooks import VictimJudgeFn, narrowest
from kai_stream.core.scheduler.framework.info import (
    ALLOCATED,
    PIPELINED,
    RUNNING,
    UNIT,
    JobInfo,
    NodeInfo,
    QueueInfo,
    TaskInfo,
)

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session


@dataclass(slots=True)
class VictimUnit:
    job: JobInfo
    tasks: list[TaskInfo]

    @property
    def gpu(self) -> int:
        return sum(len(t.gpus) * t.gpu_portion for t in self.tasks)

    def nodes(self) -> list[NodeInfo]:
        seen: dict[str, NodeInfo] = {}
        for t in self.tasks:
            if t.node is not None:
                seen.setdefault(t.node.name, t.node)
        return list(seen.values())

    def node_names(self) -> set[str]:
        return {t.node.name for t in self.tasks if t.node is not None}


def takeable(task: TaskInfo, pipelined: bool) -> bool:
    """Whether a search may take ``task``: running, or (``pipelined``) pipelined in this session onto a node."""
    return task.status == RUNNING or (pipelined and task.status == PIPELINED and task.prev_pipelined is None)


def victim_units(job: JobInfo, surplus_only: bool = False, pipelined: bool = False) -> list[VictimUnit]:
    """The job's units in the order a search takes them (surplus pods first, then the gang core unless
    ``surplus_only``); ``pipelined``: its pods pipelined in this session too (``takeable``)."""
    surplus, core = _split_units(job, surplus_only, pipelined)
    return surplus if core is None else [*surplus, core]


def _split_units(
    job: JobInfo, surplus_only: bool, pipelined: bool = False
) -> tuple[list[VictimUnit], VictimUnit | None]:
    """The job's surplus units (newest pod first) and its gang core (None with ``surplus_only`` or none left)."""
    tasks = job.tasks
    if len(tasks) == 1:
        task = tasks[0]
        if task.status != RUNNING and not takeable(task, pipelined):
            return [], None
        if job.active_count() > job.min_member:
            return [VictimUnit(job, [task])], None
        return [], None if surplus_only else VictimUnit(job, [task])
    if pipelined:
        running = [t for t in tasks if t.status == RUNNING or (t.status == PIPELINED and t.prev_pipelined is None)]
    else:
        running = [t for t in tasks if t.status == RUNNING]
    if not running:
        return [], None
    running.sort(key=lambda t: (t.created, t.name, t.uid), reverse=True)
    if job.sub_groups:
        picked = _sub_group_surplus(job, running)
        units = [VictimUnit(job, [t]) for t in picked]
        taken = set(map(id, picked))
        rest = [t for t in running if id(t) not in taken]
    else:
        surplus = max(0, min(len(running), job.active_count() - job.min_member))
        units = [VictimUnit(job, [t]) for t in running[:surplus]]
        rest = running[surplus:]
    return units, VictimUnit(job, rest) if rest and not surplus_only else None


def sub_group_active(job: JobInfo) -> dict[str, int]:
    """Per subgroup of the job (``JobInfo.sub_groups``), how many of its pods are active (running, allocated or
    pipelined)."""
    active = dict.fromkeys(dict(job.sub_groups), 0)
    for t in job.tasks:
        name = t.sub_group
        if name is not None and name in active and t.status in (RUNNING, ALLOCATED, PIPELINED):
            active[name] += 1
    return active


def _sub_group_surplus(job: JobInfo, running: list[TaskInfo]) -> list[TaskInfo]:
    """The surplus pods of a job with subgroups, in the order a search takes them (KAI's ``GetTasksToEvict``): each
    turn the subgroup most above its minMember (highest active/minMember; ties: the later name) gives its newest
    running pod, while some subgroup is above its minMember, so every subgroup keeps its minMember. ``running``:
    the job's running pods, newest first. Pods of no listed subgroup are never surplus."""
    minimum = dict(job.sub_groups)
    active = sub_group_active(job)
    pods: dict[str, list[TaskInfo]] = {name: [] for name in minimum}
    for t in reversed(running):
        name = t.sub_group
        if name is not None and name in pods:
            pods[name].append(t)
    names = sorted(minimum, reverse=True)
    picked: list[TaskInfo] = []
    while True:
        best: str | None = None
        for name in names:
            if (
                active[name] > minimum[name]
                and pods[name]
                and (best is None or active[name] * minimum[best] > active[best] * minimum[name])
            ):
                best = name
        if best is None:
            return picked
        picked.append(pods[best].pop())
        active[best] -= 1


Runs = tuple[list[int], list[int]]
"""Per index of a job list: where its run of one priority ends, and a job from it on in that run with more pods than
its minimum (-1: none)."""


def priority_runs(jobs: Sequence[JobInfo]) -> Runs:
    """The ``Runs`` of ``jobs``."""
    n = len(jobs)
    ends, elastic = [n] * n, [-1] * n
    for i in range(n - 1, -1, -1):
        job = jobs[i]
        same = i + 1 < n and jobs[i + 1].priority == job.priority
        ends[i] = ends[i + 1] if same else i + 1
        elastic[i] = i if len(job.tasks) > job.min_member else elastic[i + 1] if same else -1
    return ends, elastic


def units_in_victim_order(
    jobs: Sequence[JobInfo],
    surplus: Container[JobInfo],
    start: int = 0,
    runs: Runs | None = None,
    keep: Callable[[JobInfo], bool] | None = None,
    pipelined: bool = False,
) -> Iterator[VictimUnit]:
    """The units of ``jobs[start:]`` (in reverse job order; those ``keep`` allows) in KAI's victim order: a job gives
    one unit per turn and goes back in line, and a job above its minimum comes before one at it (KAI's elastic job
    order), so within a run of jobs of one priority every job's surplus pods come first, job by job, then their gang
    cores. A job in ``surplus`` gives its surplus pods only. Jobs are read lazily up to the next run holding a job
    of more pods than its minimum (``runs``, from ``priority_runs``); ``pipelined``: as ``victim_units``."""
    ends, elastic = priority_runs(jobs) if runs is None else runs
    i, n = start, len(jobs)
    while i < n:
        job = jobs[i]
        if elastic[i] < 0:
            if keep is None or keep(job):
                yield from victim_units(job, job in surplus, pipelined)
            i += 1
            continue
        cores: list[VictimUnit] = []
        for other in jobs[i : ends[i]]:
            if keep is None or keep(other):
                units, core = _split_units(other, other in surplus, pipelined)
                yield from units
                if core is not None:
                    cores.append(core)
        yield from cores
        i = ends[i]


def running(job: JobInfo) -> bool:
    """Whether some pod of the job is running (``any(t.status == RUNNING ...)``)."""
    for t in job.tasks:  # noqa: SIM110 (a plain loop: any() over a generator costs twice as much here)
        if t.status == RUNNING:
            return True
    return False


def takeable_in(job: JobInfo) -> bool:
    """Whether some pod of the job is ``takeable`` with pipelined pods (inlined, as ``running``)."""
    for t in job.tasks:
        status = t.status
        if status == RUNNING or (status == PIPELINED and t.prev_pipelined is None):
            return True
    return False


JudgesFn = Callable[[JobInfo, QueueInfo], tuple[VictimJudgeFn, ...]]
"""(preemptor, victim queue) -> the victim judges of one action (``Hooks.victim_judges``)."""

NO_SURPLUS_ONLY: frozenset[JobInfo] = frozenset()


def victim_judges(session: Session, action: str) -> JudgesFn | None:
    """The session's victim scopes for ``action``, None when none is registered (every preemptible running job
    may be taken whole)."""
    hooks = session.hooks
    if not hooks.victim_scopes:
        return None
    return lambda preemptor, queue: hooks.victim_judges(action, preemptor, queue)


def gpu_devices(milli: int) -> str:
    return f"{milli / UNIT:g}"


class VictimLists:
    """Per victim queue, its preemptible jobs that were running when the action started, in reverse job order;
    ``live`` skips the leading jobs whose evictions were committed (no running pod left), so later searches of the
    same action do not walk them again.

    With victim scopes registered (``judges`` not None), a preemptor sees the queue's list as its judges allow it:
    jobs they refuse left out, and the set of jobs limited to their surplus pods. The judges for a (preemptor,
    victim queue) are asked at each ``key`` (scopes memoize them); the list is kept per (victim queue, judges), so
    preemptors whose leaves resolve to the same judges share it, and is derived from the queue's unfiltered list
    (already sorted) the first time those judges are met. With ``pipelined``, a job counts as running while some
    pod of it is ``takeable`` with pipelined pods (reclaim)."""

    def __init__(self, job_key: Callable[[JobInfo], Any], judges: JudgesFn | None, pipelined: bool = False) -> None:
        self.job_key = job_key
        self.judges = judges
        self._running = takeable_in if pipelined else running
        self._lists: dict[Hashable, list[JobInfo]] = {}
        self._surplus: dict[Hashable, frozenset[JobInfo]] = {}
        self._start: dict[Hashable, int] = {}
        self._runs: dict[Hashable, Runs] = {}

    def runs(self, key: Hashable, jobs: list[JobInfo]) -> Runs:
        """``priority_runs`` of the list kept under ``key`` (``jobs``, from ``live``), computed once."""
        runs = self._runs.get(key)
        if runs is None:
            runs = self._runs[key] = priority_runs(jobs)
        return runs

    def key(self, preemptor: JobInfo, queue: QueueInfo) -> Hashable:
        """What the list ``preemptor`` sees of ``queue`` is kept under: the queue's name when nothing limits it,
        else (queue name, judges)."""
        if self.judges is None:
            return queue.name
        judges = self.judges(preemptor, queue)
        return (queue.name, judges) if judges else queue.name

    def _all(self, queue: QueueInfo) -> list[JobInfo]:
        jobs = self._lists.get(queue.name)
        if jobs is None:
            active = self._running
            jobs = [j for j in queue.jobs if j.preemptible and active(j)]
            jobs.sort(key=self.job_key, reverse=True)
            self._lists[queue.name] = jobs
            self._surplus[queue.name] = NO_SURPLUS_ONLY
        return jobs

    def live(self, queue: QueueInfo, key: Hashable) -> tuple[list[JobInfo], int, frozenset[JobInfo]]:
        """For the list kept under ``key`` (from ``key``): (victim jobs, index of the first one still running, the
        jobs that may give only their surplus pods)."""
        jobs = self._lists.get(key)
        if jobs is None:
            jobs = self._all(queue)
            if isinstance(key, tuple):
                judges: tuple[VictimJudgeFn, ...] = key[1]
                allowed: list[JobInfo] = []
                limited: list[JobInfo] = []
                for j in jobs:
                    if not self._running(j):
                        continue
                    answer = narrowest(judges, j)
                    if answer == "none":
                        continue
                    if answer == "surplus":
                        limited.append(j)
                    allowed.append(j)
                jobs = self._lists[key] = allowed
                self._surplus[key] = frozenset(limited) if limited else NO_SURPLUS_ONLY
        i = self._start.get(key, 0)
        active = self._running
        while i < len(jobs) and not active(jobs[i]):
            i += 1
        self._start[key] = i
        return jobs, i, self._surplus[key]
