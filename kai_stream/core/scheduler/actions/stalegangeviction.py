"""stale-gang eviction: a gang that has been running below its minimum for longer than the grace period is
evicted whole, so that its remaining pods stop holding resources for a job that cannot run.

A job is stale when some of its pods are running, none has succeeded, and fewer than ``minMember`` are active
(running, allocated or pipelined this cycle). How long it has been so is measured in event time from the last
change to its set of pods (``ClusterState.group_changed``: a pod observed, bound, evicted or removed) to
``state.now``; the grace period is ``stale_gang_grace_s`` (default 60 s). Every running pod of the job gets an
``EvictionRequested``.

A job whose PodGroup does not exist (deleted, or not created yet) is never stale: as in KAI, where the action
walks the PodGroups and a pod without one belongs to no gang, its pods have no ``minMember`` to be below (the
session gives such a job an unreachable one only so that allocate places none of its pending pods).
"""

from __future__ import annotations

from kai_stream.core.scheduler.framework.info import RUNNING, JobInfo
from kai_stream.core.scheduler.framework.session import Session

NAME = "stalegangeviction"


def below_minimum(job: JobInfo) -> bool:
    """Whether ``job`` is a gang running below its minimum (see above), for however long."""
    if job.group_missing or job.min_member <= 1 or job.succeeded:
        return False
    return any(t.status == RUNNING for t in job.tasks) and job.active_count() < job.min_member


def stale(job: JobInfo, now: float, grace: float) -> bool:
    """Whether ``job`` has been ``below_minimum`` for the grace period or longer (see above)."""
    return job.min_member > 1 and now - job.changed >= grace and below_minimum(job)


def run(session: Session) -> None:
    now = session.ctx.ts
    grace = session.config.stale_gang_grace_s
    for job in session.jobs:
        if not stale(job, now, grace):
            continue
        running = [t for t in job.tasks if t.status == RUNNING]
        stale_for = now - job.changed
        stmt = session.statement(NAME)
        details = {
            "active": str(job.active_count()),
            "min_member": str(job.min_member),
            "stale_since": f"{job.changed:g}",
            "stale_for_s": f"{stale_for:g}",
            "grace_s": f"{grace:g}",
        }
        reason = f"gang {job.key} below minMember {job.min_member} for {stale_for:g}s (grace {grace:g}s)"
        for task in running:
            stmt.evict(task, reason=reason, details=details)
        stmt.commit()
