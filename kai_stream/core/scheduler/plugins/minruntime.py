"""Min-runtime: a newly started job cannot be a victim of preempt or reclaim until it has run long enough.

Two limits, as in KAI, each in seconds: -1 means never evictable by that action, 0 no protection, a positive
value protects the job until the event time (``session.ctx.ts``) reaches its start plus the value. A job's
start is the latest start time of its running pods; a job with no known start is not protected. A queue's
own value is ``QueueInfo.preempt_min_runtime_s`` / ``reclaim_min_runtime_s`` (KAI's ``preemptMinRuntime`` /
``reclaimMinRuntime``, else our ``minRuntime`` shorthand); where no queue on the resolution path sets one, the
pool's default (``SchedulerConfig.preempt_min_runtime_s`` / ``reclaim_min_runtime_s``) applies.

* preempt (preemptor and victim share a leaf queue): the first preempt value set from the victim's leaf queue
  up to its root.
* reclaim (different leaf queues): the queue one level below the two leaves' lowest common ancestor on the
  victim's side (the victim's top-level queue when the two trees differ) is where resolution starts; from there
  up to the root, the first reclaim value set. Values set below that queue are the victim branch's own
  business and do not hold against a reclaimer outside the branch: a department's limit protects its teams
  from other departments, a team's own limit only from its siblings.

A protected job whose active pods exceed its ``minMember`` still gives up its surplus pods (scope "surplus"):
only the gang core is protected. Consolidation moves jobs without killing them, so it is not limited.

The victim scope resolves a limit once per victim leaf (preempt) or per (reclaimer leaf, victim leaf) (reclaim)
and answers with one judge per distinct limit, so victim searches keep one list per (victim queue, limit). A
session where no queue and no pool default sets a non-zero limit registers no victim scope, which keeps the
actions on their unfiltered path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai_stream.core.scheduler.framework.hooks import EvictScope, VictimJudgeFn
from kai_stream.core.scheduler.framework.info import RUNNING, JobInfo, QueueInfo

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session

PREEMPT = "preempt"
RECLAIM = "reclaim"


def preempt_min_runtime(victim_leaf: QueueInfo, default: float) -> float:
    """The first preempt min-runtime set from the victim's leaf queue up to its root, else ``default``."""
    for q in victim_leaf.ancestry():
        if q.preempt_min_runtime_s is not None:
            return q.preempt_min_runtime_s
    return default


def reclaim_origin(reclaimer_leaf: QueueInfo | None, victim_leaf: QueueInfo) -> QueueInfo:
    """Where a reclaim limit is resolved from: one step below the lowest common ancestor toward the victim."""
    down = victim_leaf.ancestry()
    down.reverse()
    if reclaimer_leaf is None:
        return down[0]
    other = reclaimer_leaf.ancestry()
    other.reverse()
    common = 0
    while common < len(down) and common < len(other) and down[common] is other[common]:
        common += 1
    return down[common] if common < len(down) else victim_leaf


def reclaim_min_runtime(reclaimer_leaf: QueueInfo | None, victim_leaf: QueueInfo, default: float) -> float:
    """The first reclaim min-runtime set from ``reclaim_origin`` up to the root, else ``default``."""
    for q in reclaim_origin(reclaimer_leaf, victim_leaf).ancestry():
        if q.reclaim_min_runtime_s is not None:
            return q.reclaim_min_runtime_s
    return default


def job_started(job: JobInfo) -> float | None:
    starts = [t.started for t in job.tasks if t.status == RUNNING and t.started is not None]
    return max(starts) if starts else None


def scope_for(limit: float, victim: JobInfo, now: float) -> EvictScope:
    """What a victim under ``limit`` may give at ``now``: all when unprotected, else only its surplus pods."""
    if not limit:
        return "all"
    if limit > 0:
        started = job_started(victim)
        if started is None or now >= started + limit:
            return "all"
    return "surplus" if victim.active_count() > victim.min_member else "none"


class MinRuntimePlugin:
    name = "minruntime"

    def on_session_open(self, session: Session) -> None:
        config = session.config
        preempt_default = config.preempt_min_runtime_s
        reclaim_default = config.reclaim_min_runtime_s
        if not (
            preempt_default
            or reclaim_default
            or any(q.preempt_min_runtime_s or q.reclaim_min_runtime_s for q in session.queues.values())
        ):
            return
        now = session.ctx.ts
        preempt_limits: dict[str, float] = {}
        reclaim_limits: dict[tuple[str, str], float] = {}
        judges: dict[float, VictimJudgeFn] = {}

        def judge(limit: float) -> VictimJudgeFn | None:
            """One judge per limit, so that victim lists are shared by every preemptor resolving to it."""
            if not limit:
                return None
            found = judges.get(limit)
            if found is None:
                found = judges[limit] = lambda victim: scope_for(limit, victim, now)
            return found

        def scope(action: str, preemptor: JobInfo, victim_leaf: QueueInfo) -> VictimJudgeFn | None:
            if action == PREEMPT:
                limit = preempt_limits.get(victim_leaf.name)
                if limit is None:
                    limit = preempt_limits[victim_leaf.name] = preempt_min_runtime(victim_leaf, preempt_default)
                return judge(limit)
            if action == RECLAIM:
                leaf = preemptor.queue
                pair = (leaf.name if leaf is not None else "", victim_leaf.name)
                limit = reclaim_limits.get(pair)
                if limit is None:
                    limit = reclaim_limits[pair] = reclaim_min_runtime(leaf, victim_leaf, reclaim_default)
                return judge(limit)
            return None

        session.hooks.victim_scopes.append(scope)
