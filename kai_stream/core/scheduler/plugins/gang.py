"""Gang scheduling: a job is committed only with at least minMember active pods; jobs below it go first."""

from __future__ import annotations

from kai_stream.core.scheduler.framework.hooks import SortKey
from kai_stream.core.scheduler.framework.info import JobInfo
from kai_stream.core.scheduler.framework.session import Session


def _below_minimum_first(job: JobInfo) -> SortKey:
    return (0 if job.active_count() < job.min_member else 1,)


def _ready(job: JobInfo, active: int) -> bool:
    return active >= job.min_member


class GangPlugin:
    name = "gang"

    def on_session_open(self, session: Session) -> None:
        session.hooks.job_keys.append(_below_minimum_first)
        session.hooks.job_ready.append(_ready)
