"""Hierarchical fair share, per resource, top-down through the queue tree (kai-semantics.md).

At every level, for the children of one parent (or the roots, with the pool's total):

1. each queue gets ``min(deserved, requestable)``; ``requestable = min(limit, allocated + pending)``; a
   quota of -1 (unlimited) deserves at most the level's total;
2. what remains goes by priority tier (highest first); inside a tier, in rounds, each unsatisfied queue
   with weight ``w > 0`` gets ``min(floor(remaining * w / Σw), unmet)``;
3. when a round can no longer give whole units, the leftover units go one at a time to the largest
   remainder ``remaining * w mod Σw`` (ties: older queue, then uid), skipping satisfied queues;
4. each parent's share is then split among its children the same way.

All arithmetic is in the schema's integer units (GPU milli-devices, millicores, bytes), so the result is
exact and independent of float rounding. Example: 100 GPUs, two queues deserving 10 and requesting 100,
weights 3 and 1 → 70 and 30.
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_stream.core.scheduler.framework.info import QueueInfo

__all__ = ["divide", "set_fair_shares"]

UNLIMITED = -1


def _requestable(queue: QueueInfo, r: int) -> int:
    wanted = queue.allocated[r] + queue.request[r]
    limit = queue.limit[r]
    return wanted if limit == UNLIMITED else min(limit, wanted)


def _age(queue: QueueInfo) -> tuple[float, str, str]:
    return (queue.created, queue.uid, queue.name)


def divide(total: int, queues: Sequence[QueueInfo], r: int, weights: dict[str, int] | None = None) -> dict[str, int]:
    """Split ``total`` units of resource ``r`` among sibling ``queues``; returns name -> share."""
    ordered = sorted(queues, key=_age)
    requestable = {q.name: _requestable(q, r) for q in ordered}
    share: dict[str, int] = {}
    remaining = total
    for q in ordered:
        deserved = total if q.quota[r] == UNLIMITED else q.quota[r]
        share[q.name] = max(0, min(deserved, requestable[q.name]))
        remaining -= share[q.name]
    remaining = max(0, remaining)
    for priority in sorted({q.priority for q in ordered}, reverse=True):
        if remaining <= 0:
            break
        tier = [q for q in ordered if q.priority == priority]
        remaining = _over_quota(remaining, tier, r, share, requestable, weights)
    return share


def _over_quota(
    remaining: int,
    tier: list[QueueInfo],
    r: int,
    share: dict[str, int],
    requestable: dict[str, int],
    weights: dict[str, int] | None,
) -> int:
    def weight(q: QueueInfo) -> int:
        return weights[q.name] if weights is not None and q.name in weights else q.weight[r]

    while remaining > 0:
        hungry = [q for q in tier if weight(q) > 0 and share[q.name] < requestable[q.name]]
        if not hungry:
            return remaining
        total_weight = sum(weight(q) for q in hungry)
        given = 0
        for q in hungry:
            amount = min(remaining * weight(q) // total_weight, requestable[q.name] - share[q.name])
            share[q.name] += amount
            given += amount
        if given > 0:
            remaining -= given
            continue
        by_remainder = sorted(hungry, key=lambda q: (-(remaining * weight(q) % total_weight), *_age(q)))
        while remaining > 0:
            progressed = False
            for q in by_remainder:
                if remaining == 0:
                    break
                if share[q.name] < requestable[q.name]:
                    share[q.name] += 1
                    remaining -= 1
                    progressed = True
            if not progressed:
                break
        return remaining
    return remaining


def set_fair_shares(roots: Sequence[QueueInfo], total: Sequence[int]) -> None:
    """Fill ``fair_share`` of every queue under ``roots`` from the pool's ``total`` per resource."""
    for r in range(3):
        _descend(total[r], list(roots), r)


def _descend(total: int, siblings: list[QueueInfo], r: int) -> None:
    if not siblings:
        return
    shares = divide(total, siblings, r)
    for q in siblings:
        q.fair_share[r] = shares[q.name]
        if q.children:
            _descend(q.fair_share[r], q.children, r)
