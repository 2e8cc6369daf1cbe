"""Victim units: what a victim search may take from a running job, one unit at a time.

An elastic job (more active pods than ``minMember``) first offers its surplus pods, newest first, each as its
own unit, so a search that needs little takes only pods above the minimum; then the rest of the job (its gang
core) as one unit, so a gang is never left partly running. A plain job is one unit. Only pods that were
running when the cycle started are offered (pods placed during this cycle are not victims).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kai_stream.core.scheduler.framework.info import RUNNING, UNIT, JobInfo, NodeInfo, QueueInfo, TaskInfo

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


def victim_units(job: JobInfo) -> list[VictimUnit]:
    """The job's units in the order a search takes them (surplus pods first, then the gang core)."""
    running = [t for t in job.tasks if t.status == RUNNING]
    if not running:
        return []
    running.sort(key=lambda t: (t.created, t.name, t.uid), reverse=True)
    surplus = max(0, min(len(running), job.active_count() - job.min_member))
    units = [VictimUnit(job, [t]) for t in running[:surplus]]
    rest = running[surplus:]
    if rest:
        units.append(VictimUnit(job, rest))
    return units


def running(job: JobInfo) -> bool:
    """Whether some pod of the job is running (``any(t.status == RUNNING ...)``)."""
    for t in job.tasks:  # noqa: SIM110 (a plain loop: any() over a generator costs twice as much here)
        if t.status == RUNNING:
            return True
    return False


def victim_filter(session: Session, action: str) -> Callable[[JobInfo], bool] | None:
    """The session's victim filters for ``action`` as a one-argument check, None when none is registered."""
    if not session.hooks.victim_filters:
        return None
    return lambda j: session.hooks.may_evict(action, j, j)


def gpu_devices(milli: int) -> str:
    return f"{milli / UNIT:g}"


class VictimLists:
    """Per queue, its preemptible jobs that were running when the action started and that the victim filters
    allow (asked once per action run: the built-in filters depend on the victim and event time only; ``allowed``
    None: no filter), in reverse
    job order. ``live`` skips the leading jobs whose evictions were committed (no running pod left), so later
    searches of the same action do not walk them again."""

    def __init__(self, job_key: Callable[[JobInfo], Any], allowed: Callable[[JobInfo], bool] | None) -> None:
        self.job_key = job_key
        self.allowed = allowed
        self._lists: dict[str, list[JobInfo]] = {}
        self._start: dict[str, int] = {}

    def live(self, queue: QueueInfo) -> tuple[list[JobInfo], int]:
        jobs = self._lists.get(queue.name)
        if jobs is None:
            allowed = self.allowed
            jobs = [j for j in queue.jobs if j.preemptible and running(j) and (allowed is None or allowed(j))]
            jobs.sort(key=self.job_key, reverse=True)
            self._lists[queue.name] = jobs
        i = self._start.get(queue.name, 0)
        while i < len(jobs) and not running(jobs[i]):
            i += 1
        self._start[queue.name] = i
        return jobs, i
