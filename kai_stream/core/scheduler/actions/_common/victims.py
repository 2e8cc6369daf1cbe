"""Victim units: what a victim search may take from a running job, one unit at a time.

An elastic job (more active pods than ``minMember``) first offers its surplus pods, newest first, each as its
own unit, so a search that needs little takes only pods above the minimum; then the rest of the job (its gang
core) as one unit, so a gang is never left partly running. A plain job is one unit. Only pods that were
running when the cycle started are offered (pods placed during this cycle are not victims).
"""

from __future__ import annotations

from dataclasses import dataclass

from kai_stream.core.scheduler.framework.info import RUNNING, UNIT, JobInfo, TaskInfo


@dataclass(slots=True)
class VictimUnit:
    job: JobInfo
    tasks: list[TaskInfo]

    @property
    def gpu(self) -> int:
        return sum(len(t.gpus) * t.gpu_portion for t in self.tasks)

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


def gpu_devices(milli: int) -> str:
    return f"{milli / UNIT:g}"
