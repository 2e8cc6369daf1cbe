"""Min-runtime: a newly started job cannot be a victim of preempt or reclaim until it has run long enough.

The limit is the victim queue's ``min_runtime_s``, inherited from the nearest ancestor that sets one; -1 means
never evictable by preempt/reclaim, 0 or unset means no protection. A job's start is the latest start time of
its running pods (event time); a job with no known start is not protected. Consolidation moves jobs without
killing them, so it is not limited.
"""

from __future__ import annotations

from kai_stream.core.scheduler.framework.info import RUNNING, JobInfo, QueueInfo
from kai_stream.core.scheduler.framework.session import Session

PROTECTED_ACTIONS = ("preempt", "reclaim")


def min_runtime(queue: QueueInfo) -> float | None:
    """The queue's own min-runtime, else its nearest ancestor's."""
    for q in queue.ancestry():
        if q.min_runtime_s is not None:
            return q.min_runtime_s
    return None


def job_started(job: JobInfo) -> float | None:
    starts = [t.started for t in job.tasks if t.status == RUNNING and t.started is not None]
    return max(starts) if starts else None


def protected_until(job: JobInfo) -> float | None:
    """Event time until which ``job`` is protected (inf when never evictable), or None when not protected."""
    if job.queue is None:
        return None
    limit = min_runtime(job.queue)
    if not limit:
        return None
    if limit < 0:
        return float("inf")
    started = job_started(job)
    return None if started is None else started + limit


class MinRuntimePlugin:
    name = "minruntime"

    def on_session_open(self, session: Session) -> None:
        now = session.ctx.ts

        def may_evict(action: str, preemptor: JobInfo, victim: JobInfo) -> bool:
            if action not in PROTECTED_ACTIONS:
                return True
            until = protected_until(victim)
            return until is None or now >= until

        session.hooks.victim_filters.append(may_evict)
