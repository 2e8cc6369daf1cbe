"""Min-runtime: a newly started job cannot be a victim of preempt or reclaim until it has run long enough.

The limit is the victim queue's ``min_runtime_s``, inherited from the nearest ancestor that sets one; -1 means
never evictable by preempt/reclaim, 0 or unset means no protection. A job's start is the latest start time of
its running pods (event time); a job with no known start is not protected. Consolidation moves jobs without
killing them, so it is not limited. A session where no queue sets a limit registers no victim filter.
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


class MinRuntimePlugin:
    name = "minruntime"

    def on_session_open(self, session: Session) -> None:
        now = session.ctx.ts
        limits = {name: min_runtime(q) for name, q in session.queues.items()}
        if not any(limits.values()):
            return

        def may_evict(action: str, preemptor: JobInfo, victim: JobInfo) -> bool:
            if action not in PROTECTED_ACTIONS or victim.queue is None:
                return True
            limit = limits.get(victim.queue.name) if victim.queue.name in limits else min_runtime(victim.queue)
            if not limit:
                return True
            if limit < 0:
                return False
            started = job_started(victim)
            return started is None or now >= started + limit

        session.hooks.victim_filters.append(may_evict)
