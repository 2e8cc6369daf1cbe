"""Job order: higher priority first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai_stream.core.scheduler.framework.hooks import SortKey
from kai_stream.core.scheduler.framework.info import JobInfo

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session


def _key(job: JobInfo) -> SortKey:
    return (-job.priority,)


class PriorityPlugin:
    name = "priority"

    def on_session_open(self, session: Session) -> None:
        session.hooks.job_keys.append(_key)
