"""Proportion: fair shares for the session, queue order (DRF) and queue limit / deserved-quota checks.

Queue order, smaller first: not over fair share; stays within deserved with the job; higher queue
priority; lower dominant-resource share with the job, then without (share of a resource = allocated /
min(limit, max(deserved, fair share))); then older queue (creation time, uid).
"""

from __future__ import annotations

from kai_stream.core.events import PendingCode
from kai_stream.core.scheduler.fairshare import set_fair_shares
from kai_stream.core.scheduler.framework.hooks import SortKey
from kai_stream.core.scheduler.framework.info import RESOURCES, JobInfo, QueueInfo
from kai_stream.core.scheduler.framework.session import Session

UNLIMITED = -1
INF = float("inf")


def _allocatable_share(q: QueueInfo, r: int) -> int:
    deserved = q.fair_share[r] if q.quota[r] == UNLIMITED else q.quota[r]
    cap = max(deserved, q.fair_share[r])
    return cap if q.limit[r] == UNLIMITED else min(q.limit[r], cap)


def dominant_share(q: QueueInfo, extra: list[int]) -> float:
    worst = 0.0
    for r in range(3):
        used = q.allocated[r] + extra[r]
        if used <= 0:
            continue
        cap = _allocatable_share(q, r)
        share = used / cap if cap > 0 else INF
        worst = max(worst, share)
    return worst


class ProportionPlugin:
    name = "proportion"

    def __init__(self) -> None:
        self.session: Session | None = None
        self._requests: dict[str, list[int]] = {}

    def on_session_open(self, session: Session) -> None:
        self.session = session
        set_fair_shares(session.roots, session.total)
        session.hooks.queue_keys.append(self.queue_key)
        session.hooks.job_checks.append(self.check_job)

    def _request(self, job: JobInfo) -> list[int]:
        cached = self._requests.get(job.key)
        if cached is None:
            assert self.session is not None
            cached = self.session.job_request(job)
            self._requests[job.key] = cached
        return cached

    def queue_key(self, q: QueueInfo, job: JobInfo) -> SortKey:
        request = self._request(job)
        over_fair_share = any(q.allocated[r] > q.fair_share[r] for r in range(3))
        over_deserved = any(
            q.quota[r] != UNLIMITED and request[r] > 0 and q.allocated[r] + request[r] > q.quota[r] for r in range(3)
        )
        return (
            over_fair_share,
            over_deserved,
            -q.priority,
            dominant_share(q, request),
            dominant_share(q, [0, 0, 0]),
        )

    def check_job(self, job: JobInfo, request: list[int]) -> tuple[PendingCode, str] | None:
        queue = job.queue
        if queue is None:
            return ("UnknownQueue", f"queue {job.queue_name!r} does not exist")
        for q in queue.ancestry():
            for r in range(3):
                if q.limit[r] != UNLIMITED and request[r] > 0 and q.allocated[r] + request[r] > q.limit[r]:
                    return (
                        "QueueOverLimit",
                        f"queue {q.name} {RESOURCES[r]} limit {q.limit[r]} < allocated {q.allocated[r]}"
                        f" + request {request[r]}",
                    )
        if not job.preemptible:
            for r in range(3):
                quota = queue.quota[r]
                if quota != UNLIMITED and request[r] > 0 and queue.allocated_np[r] + request[r] > quota:
                    return (
                        "OverDeservedNonPreemptible",
                        f"non-preemptible job over queue {queue.name} deserved {RESOURCES[r]} {quota}:"
                        f" non-preemptible allocated {queue.allocated_np[r]} + request {request[r]}",
                    )
        return None
