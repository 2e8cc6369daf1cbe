"""Nomination: a job already pipelined onto a node by an earlier cycle (typically onto capacity that a reclaim,
preempt or consolidation freed for it) is offered first — its queue before other queues, and before other jobs
of its queue — so the capacity evicted for it is not handed to someone else (such as the restarted victim)
while it waits. Registered before proportion and priority so that its keys come first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai_stream.core.scheduler.framework.hooks import SortKey
from kai_stream.core.scheduler.framework.info import PENDING, JobInfo, QueueInfo

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session


def nominated(job: JobInfo) -> bool:
    return any(t.prev_pipelined is not None and t.status == PENDING for t in job.tasks)


_FIRST: SortKey = (0,)
_REST: SortKey = (1,)


class NominationPlugin:
    name = "nomination"

    def __init__(self) -> None:
        self._with_nomination: set[str] = set()
        """Jobs with a task nominated when the session opened (``Session.nominated``, kept by the snapshot, so a
        session does not scan every job's tasks for it; nominations are only read from the state)."""

    def on_session_open(self, session: Session) -> None:
        self._with_nomination = session.nominated
        session.hooks.job_keys.append(self._job_key)
        session.hooks.queue_keys.append(self._queue_key)
        session.hooks.queue_key_reads.append(self._first)

    def _job_key(self, job: JobInfo) -> SortKey:
        return _FIRST if self._first(job) else _REST

    def _first(self, job: JobInfo) -> bool:
        return job.key in self._with_nomination and nominated(job)

    def _queue_key(self, queue: QueueInfo, job: JobInfo) -> SortKey:
        return _FIRST if self._first(job) else _REST
