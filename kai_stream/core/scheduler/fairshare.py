"""Hierarchical fair share, per resource, top-down through the queue tree (kai-semantics.md).

At every level, for the children of one parent (or the roots, with the pool's total), as KAI's
``resource_division`` does:

1. each queue gets ``min(deserved, requestable)``; ``requestable = min(limit, allocated + pending)``; a
   quota of -1 (unlimited) deserves at most the level's total;
2. what remains goes by priority tier (highest first), in rounds: each queue of the tier not yet satisfied,
   with weight ``w > 0``, is offered ``round total * w / Σw`` (Σ over the unsatisfied); a queue that asks
   no more than its offer gets what it asks, any other gets its offer floored to whole units (whole GPUs;
   millicores; bytes) and keeps the fraction it lost as its remainder; another round runs while some queue
   took less than its offer;
3. once every tier has had its rounds, the units still left go, tier by tier (highest first), one unit (or
   what is left, if less) to each queue with a remainder, largest remainder first (ties: older queue, then
   uid);
4. each parent's share is then split among its children the same way.

All arithmetic is exact (integer units, rational offers), so the result does not depend on float rounding.
Example: 100 GPUs, two queues deserving 10 and requesting 100, weights 3 and 1 → 70 and 30.

``round_weights`` (time-based fair share, ``timeshare``) replaces the over-quota weights of each round: it is
given the round's unsatisfied queues of the tier and returns their weights.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

from kai_stream.core.scheduler.framework.info import QueueInfo

__all__ = ["RoundWeights", "divide", "set_fair_shares"]

UNLIMITED = -1
WHOLE = (1000, 1, 1)
"""The whole unit a round floors to, per resource (GPU milli-devices, millicores, bytes)."""
RoundWeights = Callable[[Sequence[QueueInfo], int], Mapping[str, Fraction]]
"""(a round's unsatisfied queues, resource) -> their weights for that round."""


def _requestable(queue: QueueInfo, r: int) -> int:
    wanted = queue.allocated[r] + queue.request[r]
    limit = queue.limit[r]
    return wanted if limit == UNLIMITED else min(limit, wanted)


def _age(queue: QueueInfo) -> tuple[float, str, str]:
    return (queue.created, queue.uid, queue.name)


def divide(
    total: int,
    queues: Sequence[QueueInfo],
    r: int,
    weights: dict[str, int] | None = None,
    round_weights: RoundWeights | None = None,
) -> dict[str, int]:
    """Split ``total`` units of resource ``r`` among sibling ``queues``; returns name -> share."""
    ordered = sorted(queues, key=_age)
    requestable = {q.name: _requestable(q, r) for q in ordered}
    share: dict[str, int] = {}
    remaining = total
    for q in ordered:
        deserved = total if q.quota[r] == UNLIMITED else q.quota[r]
        share[q.name] = max(0, min(deserved, requestable[q.name]))
        remaining -= share[q.name]
    if remaining <= 0:
        return share
    unit = WHOLE[r]
    tiers = [[q for q in ordered if q.priority == p] for p in sorted({q.priority for q in ordered}, reverse=True)]
    remainders: list[dict[str, Fraction]] = []
    for tier in tiers:
        remaining, left = _up_to_fair_share(remaining, tier, r, share, requestable, weights, unit, round_weights)
        remainders.append(left)
    for tier, left in zip(tiers, remainders, strict=True):
        if remaining <= 0:
            break
        for q in sorted((q for q in tier if q.name in left), key=lambda q: (-left[q.name], *_age(q))):
            if remaining <= 0:
                break
            amount = min(unit, remaining)
            share[q.name] += amount
            remaining -= amount
    return share


def _up_to_fair_share(
    remaining: int,
    tier: list[QueueInfo],
    r: int,
    share: dict[str, int],
    requestable: dict[str, int],
    weights: dict[str, int] | None,
    unit: int,
    round_weights: RoundWeights | None = None,
) -> tuple[int, dict[str, Fraction]]:
    """The rounds of one priority tier; returns what is left and each floored queue's lost fraction."""
    this_round: Mapping[str, Fraction] = {}

    def weight(q: QueueInfo) -> int | Fraction:
        if round_weights is not None:
            return this_round[q.name]
        return weights[q.name] if weights is not None and q.name in weights else q.weight[r]

    left: dict[str, Fraction] = {}
    while remaining > 0:
        hungry = [q for q in tier if share[q.name] < requestable[q.name]]
        if round_weights is not None:
            this_round = round_weights(hungry, r)
        total_weight = sum(max(0, weight(q)) for q in hungry)
        if total_weight == 0:
            break
        offered_total = remaining
        again = False
        for q in hungry:
            if remaining == 0:
                break
            w = weight(q)
            if w <= 0:
                continue
            asked = requestable[q.name] - share[q.name]
            offer = Fraction(offered_total * w, total_weight)
            if asked <= offer:
                amount = asked
                left.pop(q.name, None)
                again = again or asked < offer
            else:
                amount = (offer.numerator // offer.denominator) // unit * unit
                if offer > amount:
                    left[q.name] = offer - amount
            share[q.name] += amount
            remaining -= amount
        if not again:
            break
    return remaining, left


def set_fair_shares(
    roots: Sequence[QueueInfo], total: Sequence[int], round_weights: RoundWeights | None = None
) -> None:
    """Fill ``fair_share`` of every queue under ``roots`` from the pool's ``total`` per resource."""
    for r in range(3):
        _descend(total[r], list(roots), r, round_weights)


def _descend(total: int, siblings: list[QueueInfo], r: int, round_weights: RoundWeights | None = None) -> None:
    if not siblings:
        return
    shares = divide(total, siblings, r, round_weights=round_weights)
    for q in siblings:
        q.fair_share[r] = shares[q.name]
        if q.children:
            _descend(q.fair_share[r], q.children, r, round_weights)
