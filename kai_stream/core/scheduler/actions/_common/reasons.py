"""Which constraint keeps a job out when its queue would pass its fair share (or deserved quota) by reclaiming.

Reclaim refuses a job whose queue would end over its bound with it; that is the job's pending reason only when
the bound is what binds. When the pool itself cannot hold the queue's allocation plus the job (its total, less
what non-preemptible pods of other queues hold, which no reclaim frees), the reason is capacity
(``InsufficientCapacity``): one queue alone on a full pool, a gang larger than the pool, a pool with no nodes, a
gang behind non-preemptible pods. Both reasons carry their numbers (GPU in devices, CPU millicores, memory
bytes) in the text and in the details.

A job whose queue stays within its bound but whose reclaim search found no victim set, while some queue over its
fair share runs jobs that the reclaim min-runtime protects, gets ``MinRuntimeProtected`` naming the first such
job, its limit and when its protection ends (a fixed time, so the reason does not change from cycle to cycle;
``protected_reason``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from kai_stream.core.scheduler.actions._common.fairness import UNLIMITED, _fmt, queue_details
from kai_stream.core.scheduler.framework.hooks import narrowest
from kai_stream.core.scheduler.framework.info import RESOURCES, RUNNING, JobInfo, QueueInfo
from kai_stream.core.scheduler.framework.session import PendingInfo, Session

__all__ = ["held_elsewhere", "protected_reason", "share_reason"]

_UNITS = ("GPU", "millicores CPU", "bytes memory")


def held_elsewhere(ssn: Session, leaf: QueueInfo) -> list[int]:
    """What non-preemptible pods of queues other than ``leaf`` hold in the pool, per resource."""
    total = [sum(root.allocated_np[r] for root in ssn.roots) for r in range(3)]
    return [total[r] - leaf.allocated_np[r] for r in range(3)]


def share_reason(
    ssn: Session,
    job: JobInfo,
    request: Sequence[int],
    allocated: Sequence[int],
    bound: str,
    predicates: dict[str, int],
) -> PendingInfo:
    """The pending reason of ``job`` (requesting ``request``) refused because its queue, at ``allocated``, would
    pass ``bound`` ("fair share" or "deserved quota") with it."""
    leaf = job.queue
    assert leaf is not None
    held = held_elsewhere(ssn, leaf)
    for r in range(3):
        room = ssn.total[r] - held[r]
        if request[r] > 0 and allocated[r] + request[r] > room:
            return _capacity(ssn, job, leaf, r, request[r], allocated[r], room, held[r], predicates)
    limit = leaf.fair_share if bound == "fair share" else leaf.quota
    over = [r for r in range(3) if request[r] > 0 and limit[r] != UNLIMITED and allocated[r] + request[r] > limit[r]]
    details = queue_details("queue", leaf)
    for r, name in enumerate(RESOURCES):
        details[f"queue_{name}_allocated"] = _fmt(r, allocated[r])
    if not over:
        text = f"job {job.key} does not fit and queue {leaf.name} would exceed its {bound} by reclaiming"
    else:
        r = over[0]
        text = (
            f"job {job.key} does not fit and queue {leaf.name} would exceed its {bound} by reclaiming: it holds"
            f" {_fmt(r, allocated[r])} + the job's {_fmt(r, request[r])} > {bound} {_fmt(r, limit[r])} {_UNITS[r]}"
        )
    return PendingInfo("NotEnoughOverQuotaShare", text, predicates, details)


def _capacity(
    ssn: Session,
    job: JobInfo,
    leaf: QueueInfo,
    r: int,
    request: int,
    allocated: int,
    room: int,
    held: int,
    predicates: dict[str, int],
) -> PendingInfo:
    unit = _UNITS[r]
    if not ssn.nodes:
        text = f"job {job.key} needs {_fmt(r, request)} {unit} and pool {ssn.ctx.pool} has no nodes"
    else:
        pool = f"the pool has {_fmt(r, ssn.total[r])} {unit}"
        if held:
            pool += f", {_fmt(r, held)} of them held by non-preemptible pods of other queues"
        mine = f"queue {leaf.name} already holds {_fmt(r, allocated)}; " if allocated else ""
        text = f"job {job.key} needs {_fmt(r, request)} {unit}; {mine}{pool}"
    details = {
        "queue": leaf.name,
        "resource": RESOURCES[r],
        "job_request": _fmt(r, request),
        "queue_allocated": _fmt(r, allocated),
        "pool_total": _fmt(r, ssn.total[r]),
        "held_non_preemptible_elsewhere": _fmt(r, held),
        "room": _fmt(r, room),
    }
    return PendingInfo("InsufficientCapacity", text, predicates, details)


def protected_reason(
    ssn: Session, job: JobInfo, request: Sequence[int], predicates: dict[str, int]
) -> PendingInfo | None:
    """``MinRuntimeProtected`` when a queue over its fair share on a resource ``job`` requests runs a preemptible
    job the reclaim min-runtime keeps from ``job`` (the first by queue and job name); None when there is none."""
    from kai_stream.core.scheduler.plugins.minruntime import job_started, reclaim_min_runtime

    leaf = job.queue
    assert leaf is not None
    if not ssn.hooks.victim_scopes:
        return None
    for q in sorted(ssn.queues.values(), key=lambda q: q.name):
        if q is leaf or q.children or not q.jobs:
            continue
        over = [r for r in range(3) if request[r] > 0 and q.allocated[r] > q.fair_share[r]]
        if not over:
            continue
        judges = ssn.hooks.victim_judges("reclaim", job, q)
        if not judges:
            continue
        for victim in sorted(q.jobs, key=lambda j: j.key):
            if not victim.preemptible or not any(t.status == RUNNING for t in victim.tasks):
                continue
            if narrowest(judges, victim) != "none":
                continue
            limit = reclaim_min_runtime(leaf, q, ssn.config.reclaim_min_runtime_s)
            started = job_started(victim)
            r = over[0]
            until = "never reclaimable (reclaimMinRuntime -1)"
            end = ""
            if limit > 0 and started is not None:
                end = datetime.fromtimestamp(started + limit, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                until = f"protected by reclaimMinRuntime {limit:g} s until {end}"
            text = (
                f"job {job.key} does not fit; queue {q.name} is over its fair share ({_fmt(r, q.allocated[r])} >"
                f" {_fmt(r, q.fair_share[r])} {_UNITS[r]}) but its job {victim.key} is {until}"
            )
            details = {
                "victim_queue": q.name,
                "victim_job": victim.key,
                "reclaim_min_runtime_s": f"{limit:g}",
                "protected_until": end,
            }
            return PendingInfo("MinRuntimeProtected", text, predicates, details)
    return None
