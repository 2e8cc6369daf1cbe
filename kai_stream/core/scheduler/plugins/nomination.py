"""Nomination: a job already pipelined onto a node by an earlier cycle (typically onto capacity that a reclaim,
preempt or consolidation freed for it) is offered first — its queue before other queues, and before other jobs
of its queue — so the capacity evicted for it is not handed to someone else (such as the restarted victim)
while it waits. Registered before proportion and priority so that its keys come first.
"""

from __future__ import annotations

from kai_stream.core.scheduler.framework.hooks import SortKey
from kai_stream.core.scheduler.framework.info import PENDING, JobInfo, QueueInfo
from kai_stream.core.scheduler.framework.session import Session


def nominated(job: JobInfo) -> bool:
    return any(t.prev_pipelined is not None and t.status == PENDING for t in job.tasks)


def _job_key(job: JobInfo) -> SortKey:
    return (0 if nominated(job) else 1,)


def _queue_key(queue: QueueInfo, job: JobInfo) -> SortKey:
    return (0 if nominated(job) else 1,)


class NominationPlugin:
    name = "nomination"

    def on_session_open(self, session: Session) -> None:
        session.hooks.job_keys.append(_job_key)
        session.hooks.queue_keys.append(_queue_key)
