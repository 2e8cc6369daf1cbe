"""Gang scheduling: a job is committed only with at least minMember active pods, and as many as each of its
subgroups' minMember in that subgroup (all-or-nothing per subgroup); jobs below their minimum go first, and
among pending jobs past it those at it before those above it (KAI's elastic plugin)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai_stream.core.scheduler.framework.hooks import SortKey
from kai_stream.core.scheduler.framework.info import ALLOCATED, PIPELINED, RUNNING, JobInfo

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session

_BELOW: SortKey = (0,)
_REACHED: SortKey = (1,)
_AT: SortKey = (0,)
_ABOVE: SortKey = (1,)
_ACTIVE = (RUNNING, ALLOCATED, PIPELINED)


def _below_minimum_first(job: JobInfo) -> SortKey:
    """(0,) while ``job.active_count() < job.min_member``, else (1,); counts only up to the minimum."""
    need = job.min_member
    if need <= 0:
        return _REACHED
    for task in job.tasks:
        if task.status in _ACTIVE:
            need -= 1
            if not need:
                return _REACHED
    return _BELOW


def _at_minimum_first(job: JobInfo) -> SortKey:
    """Among pending jobs past their minimum, (0,) at exactly minMember active pods, (1,) above it: a job that got
    its minimum waits behind the others' minimum, then one task each (KAI's elastic order over the passes)."""
    extra = job.min_member + 1
    for task in job.tasks:
        if task.status in _ACTIVE:
            extra -= 1
            if extra <= 0:
                return _ABOVE
    return _AT


def _ready(job: JobInfo, active: int) -> bool:
    if active < job.min_member:
        return False
    for name, need in job.sub_groups:
        for task in job.tasks:
            if task.sub_group == name and task.status in _ACTIVE:
                need -= 1
                if need <= 0:
                    break
        if need > 0:
            return False
    return True


class GangPlugin:
    name = "gang"

    def on_session_open(self, session: Session) -> None:
        session.hooks.job_keys.append(_below_minimum_first)
        session.hooks.pending_job_keys.append(_at_minimum_first)
        session.hooks.job_ready.append(_ready)
