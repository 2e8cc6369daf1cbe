"""Proportion: fair shares for the session, queue order (DRF) and queue limit / deserved-quota checks.

Queue order, smaller first: not over fair share; stays within deserved with the job; higher queue
priority; lower dominant-resource share with the job, then without (share of a resource = allocated /
allocatable share, see ``allocatable_share``); then the smaller allocatable share (KAI's partial order "no
larger in any resource, smaller in one", read lexicographically GPU, CPU, memory); then older queue (creation
time, uid).

A job is refused when it would take a queue on its ancestry over its limit, or, non-preemptible, over the
deserved quota of its leaf queue or of any ancestor.

With ``usage_params`` configured, the over-quota division weighs queues by their historical usage
(``timeshare``); without it, fair shares are as KAI's without a usage database.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kai_stream.core.events import PendingCode
from kai_stream.core.scheduler.fairshare import set_fair_shares
from kai_stream.core.scheduler.framework.hooks import SortKey
from kai_stream.core.scheduler.framework.info import RESOURCES, JobInfo, QueueInfo
from kai_stream.core.scheduler.timeshare import queue_usage, round_weights

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session

UNLIMITED = -1
_ZERO = [0, 0, 0]


NO_SHARE_PENALTY = (1, 1000, 1000)
"""KAI's ``noFairShareDrfMultiplier`` (1000) per unit of ours: a resource the queue uses with an allocatable share
of 0 counts as 1000 x what it uses (GPU in devices = our milli-devices x 1000 / 1000; millicores; bytes)."""


def allocatable_share(q: QueueInfo, r: int, total: Sequence[int]) -> int:
    """The denominator of the dominant-resource share (KAI ``GetAllocatableShare``): an unlimited deserved quota
    is measured against the limit, or the pool's ``total`` when there is none; otherwise min(limit, max(deserved,
    fair share))."""
    if q.quota[r] == UNLIMITED:
        return total[r] if q.limit[r] == UNLIMITED else q.limit[r]
    cap = max(q.quota[r], q.fair_share[r])
    return cap if q.limit[r] == UNLIMITED else min(q.limit[r], cap)


def dominant_share(q: QueueInfo, extra: Sequence[int]) -> float:
    """max over resources of (allocated + extra) / allocatable share (KAI's penalty when that share is 0)."""
    worst = 0.0
    alloc = q.allocated
    caps = q.share_cap
    for r in (0, 1, 2):
        used = alloc[r] + extra[r]
        if used > 0:
            cap = caps[r]
            share = used / cap if cap > 0 else float(used * NO_SHARE_PENALTY[r])
            if share > worst:
                worst = share
    return worst


class ProportionPlugin:
    name = "proportion"

    def __init__(self) -> None:
        self.session: Session | None = None
        self._keys: dict[tuple[str, int, int, int, int, int, int], SortKey] = {}
        """Queue keys by (queue, allocation, job request): the rest of what a key reads is fixed per session."""
        self._limits: dict[str, tuple[tuple[QueueInfo, int], ...]] = {}
        self._quotas: dict[str, tuple[tuple[QueueInfo, int], ...]] = {}

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self._keys = {}
        self._limits = {}
        self._quotas = {}
        weigh = None
        if session.config.usage_params is not None:
            weigh = round_weights(queue_usage(session.queues, session.usage), session.config.usage_decay_k)
        set_fair_shares(session.roots, session.total, weigh)
        for q in session.queues.values():
            q.share_cap = [allocatable_share(q, r, session.total) for r in range(3)]
        session.hooks.queue_keys.append(self.queue_key)
        session.hooks.queue_key_reads.append(self._request_read)
        session.hooks.job_checks.append(self.check_job)

    def _request(self, job: JobInfo) -> tuple[int, int, int]:
        assert self.session is not None
        return self.session.ranking_request(job)

    def _request_read(self, job: JobInfo) -> tuple[int, ...]:
        return self._request(job)

    def queue_key(self, q: QueueInfo, job: JobInfo) -> SortKey:
        request = self._request(job)
        alloc = q.allocated
        memo = (q.name, alloc[0], alloc[1], alloc[2], request[0], request[1], request[2])
        key = self._keys.get(memo)
        if key is None:
            key = self._keys[memo] = self._queue_key(q, request)
        return key

    @staticmethod
    def _queue_key(q: QueueInfo, request: tuple[int, int, int]) -> SortKey:
        alloc, fair, quota = q.allocated, q.fair_share, q.quota
        over_fair_share = alloc[0] > fair[0] or alloc[1] > fair[1] or alloc[2] > fair[2]
        over_deserved = False
        for r in (0, 1, 2):
            if quota[r] != UNLIMITED and request[r] > 0 and alloc[r] + request[r] > quota[r]:
                over_deserved = True
                break
        return (
            over_fair_share,
            over_deserved,
            -q.priority,
            dominant_share(q, request),
            dominant_share(q, _ZERO),
            q.share_cap[0],
            q.share_cap[1],
            q.share_cap[2],
        )

    def _limits_of(self, queue: QueueInfo) -> tuple[tuple[QueueInfo, int], ...]:
        """The (queue, resource) pairs with a limit on the queue's ancestry, leaf first: limits are fixed for the
        session, and most queues have none, so ``check_job`` need not walk the tree for them."""
        limits = self._limits.get(queue.name)
        if limits is None:
            limits = tuple((q, r) for q in queue.ancestry() for r in range(3) if q.limit[r] != UNLIMITED)
            self._limits[queue.name] = limits
        return limits

    def _quotas_of(self, queue: QueueInfo) -> tuple[tuple[QueueInfo, int], ...]:
        """The (queue, resource) pairs with a deserved quota on the queue's ancestry, leaf first: a
        non-preemptible job must fit each of them (KAI's quota check walks the leaf and every ancestor)."""
        quotas = self._quotas.get(queue.name)
        if quotas is None:
            quotas = tuple((q, r) for q in queue.ancestry() for r in range(3) if q.quota[r] != UNLIMITED)
            self._quotas[queue.name] = quotas
        return quotas

    def check_job(self, job: JobInfo, request: list[int]) -> tuple[PendingCode, str] | None:
        queue = job.queue
        if queue is None:
            return ("UnknownQueue", f"queue {job.queue_name!r} does not exist")
        for q, r in self._limits_of(queue):
            if request[r] > 0 and q.allocated[r] + request[r] > q.limit[r]:
                return (
                    "QueueOverLimit",
                    f"queue {q.name} {RESOURCES[r]} limit {q.limit[r]} < allocated {q.allocated[r]}"
                    f" + request {request[r]}",
                )
        if not job.preemptible:
            for q, r in self._quotas_of(queue):
                quota = q.quota[r]
                if request[r] > 0 and q.allocated_np[r] + request[r] > quota:
                    return (
                        "OverDeservedNonPreemptible",
                        f"non-preemptible job over queue {q.name} deserved {RESOURCES[r]} {quota}:"
                        f" non-preemptible allocated {q.allocated_np[r]} + request {request[r]}",
                    )
        return None
