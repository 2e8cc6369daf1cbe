"""Bind back-off: a pod whose bind failed is not placed again until its back-off, counted in event time, ends.

A bind the API server refuses for good (403, 422, a webhook) would otherwise be decided again every cycle. The
fold keeps, per pod, its failed binds in a row and the last one's event time and error (``state.bind_failures``);
the pod is held until ``last failure ts + min(bind_backoff_s * 2^(failures-1), bind_backoff_max_s)``, compared with
``state.now`` (the largest event time folded), so a replay holds it exactly as the live cycle did.

A job with a held pending pod is held whole (a gang cannot complete without it): no action considers it this
cycle, and its pending pods are reported ``BindBackoff`` with the last failure's error and the time of the next try.
"""

from __future__ import annotations

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.scheduler.framework.info import PENDING, JobInfo, TaskInfo
from kai_stream.core.state import BindFailures, ClusterState

__all__ = ["backoff_until", "held_jobs"]

_MAX_ERROR = 512
"""Characters of the last failure's error quoted in the reason."""


def backoff_until(failed: BindFailures, config: SchedulerConfig) -> float:
    """The event time before which a pod with these failed binds is not placed again."""
    delay = config.bind_backoff_s * 2.0 ** min(failed.count - 1, 62)
    return failed.ts + min(delay, config.bind_backoff_max_s)


def held_jobs(
    jobs: list[JobInfo], tasks: dict[str, TaskInfo], state: ClusterState, config: SchedulerConfig
) -> tuple[list[JobInfo], list[tuple[JobInfo, str]]]:
    """``jobs`` split into those the cycle may act for (order kept) and those held, each with its reason (that of
    its held pod first in uid order). ``tasks``: the snapshot's tasks by uid."""
    now = state.now
    reasons: dict[str, str] = {}
    for uid, failed in sorted(state.bind_failures.items()):
        task = tasks.get(uid)
        if task is None or task.status != PENDING or task.job.key in reasons:
            continue
        until = backoff_until(failed, config)
        if now < until:
            reasons[task.job.key] = (
                f"bind of {task.namespace}/{task.name} failed {failed.count} time(s) in a row, last: "
                f"{failed.error[:_MAX_ERROR]}; next try at ts {until:.3f}"
            )
    if not reasons:
        return jobs, []
    free = [job for job in jobs if job.key not in reasons]
    held = [(job, reasons[job.key]) for job in jobs if job.key in reasons]
    return free, held
