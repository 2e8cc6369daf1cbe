"""Time-based fair share (KAI ``docs/time-based-fairshare``): queues' historical usage lowers their over-quota weight.

``usage_shares`` reads the fold's ``UsageLedger`` as KAI reads Prometheus: per queue and resource, the usage in the
window, each moment weighted by ``0.5 ** (age / halfLifePeriod)`` (no decay without a half-life), divided by the
cluster capacity over the same window with the same weights. The window is the last ``windowSize`` (sliding) or
the time since the last reset at ``tumblingWindowStartTime + n * windowSize`` (tumbling). Time is sampled per
ledger bucket (``BUCKET_S``): a bucket ``k`` buckets before the current one weighs ``0.5 ** (k * BUCKET_S /
halfLifePeriod)`` (ages between bucket middles; the factor common to every bucket cancels in the ratio), and the
bucket cut by the window's start counts for the part inside. A parent queue's usage is the sum of its children's
and its own.

``round_weights`` is KAI's ``calcShareWeights``: in every round of over-quota division, among the round's
unsatisfied queues, ``nw = w / Σw`` and the queue's weight becomes ``max(0, nw + k (nw - usage))``, in exact
rationals (the usage's float taken exactly), so a zero usage gives the same division as plain weights.
Deserved quotas are untouched: usage only moves what is shared over quota.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING

from kai_stream.core.scheduler.fairshare import RoundWeights
from kai_stream.core.scheduler.framework.info import QueueInfo
from kai_stream.core.usage import BUCKET_S, UsageLedger

if TYPE_CHECKING:
    from kai_stream.core.config import UsageParams

__all__ = ["queue_usage", "round_weights", "usage_shares", "window_start"]

Usage = tuple[float, float, float]


def window_start(params: UsageParams, now: float) -> float:
    """The first moment the window counts."""
    size = params.window_size_s
    if params.window_type == "tumbling":
        origin = params.tumbling_window_start_time
        assert origin is not None
        if origin >= now:
            return now
        return origin + ((now - origin) // size) * size
    return now - size


@lru_cache(maxsize=16)
def _decay(half_life: float | None, count: int) -> tuple[float, ...]:
    """The weight of a bucket ``k`` buckets before the current one, for k < ``count``."""
    if half_life is None:
        return (1.0,) * count
    return tuple(0.5 ** (k * BUCKET_S / half_life) for k in range(count))


def _weighted(ledger: UsageLedger, queue: str | None, now: float, start: float, decay: tuple[float, ...]) -> Usage:
    """Σ over the window's buckets of resource-seconds x weight (open segment included, nothing written)."""
    if queue is None:
        stored, held, since = ledger.capacity_buckets, ledger.capacity, ledger.capacity_since
    else:
        stored = ledger.buckets.get(queue, {})
        held, since = ledger.held.get(queue, (0, 0, 0)), ledger.since.get(queue, now)
    first, last = int(start // BUCKET_S), int(now // BUCKET_S)
    cut = ((first + 1) * BUCKET_S - start) / BUCKET_S
    g = c = m = 0.0
    span = range(first, last + 1) if last - first < len(stored) else sorted(b for b in stored if b >= first)
    for b in span:
        cell = stored.get(b)
        if cell is not None:
            w = decay[last - b] * (cut if b == first else 1.0)
            g += cell[0] * w
            c += cell[1] * w
            m += cell[2] * w
    if held != (0, 0, 0) and now > since:
        for b in range(max(first, int(since // BUCKET_S)), last + 1):
            dt = (min(now, (b + 1) * BUCKET_S) - max(since, b * BUCKET_S)) * decay[last - b]
            if b == first:
                dt *= cut
            g += held[0] * dt
            c += held[1] * dt
            m += held[2] * dt
    return (g, c, m)


def usage_shares(ledger: UsageLedger, params: UsageParams, now: float, default_queue: str) -> dict[str, Usage]:
    """Per leaf queue (``""`` read as ``default_queue``): decayed usage / decayed capacity in the window, per
    resource; 0 where the capacity integral is 0. Queues without usage are absent."""
    start = min(window_start(params, now), now)
    decay = _decay(params.half_life_period_s, int(now // BUCKET_S) - int(start // BUCKET_S) + 1)
    capacity = _weighted(ledger, None, now, start, decay)
    shares: dict[str, Usage] = {}
    for queue in ledger.queues():
        used = _weighted(ledger, queue, now, start, decay)
        name = queue or default_queue
        before = shares.get(name, (0.0, 0.0, 0.0))
        shares[name] = (
            before[0] + (used[0] / capacity[0] if capacity[0] > 0 else 0.0),
            before[1] + (used[1] / capacity[1] if capacity[1] > 0 else 0.0),
            before[2] + (used[2] / capacity[2] if capacity[2] > 0 else 0.0),
        )
    return shares


def queue_usage(queues: Mapping[str, QueueInfo], leaf: Mapping[str, Usage]) -> dict[str, Usage]:
    """Every queue's usage: its own (``leaf``) plus its descendants'."""
    total: dict[str, list[float]] = {name: [0.0, 0.0, 0.0] for name in sorted(queues)}
    for name in sorted(leaf):
        q = queues.get(name)
        own = leaf[name]
        while q is not None:
            acc = total[q.name]
            acc[0] += own[0]
            acc[1] += own[1]
            acc[2] += own[2]
            q = q.parent
    return {name: (v[0], v[1], v[2]) for name, v in total.items()}


def round_weights(usage: Mapping[str, Usage], k: float) -> RoundWeights:
    """KAI's ``calcShareWeights`` over each round's unsatisfied queues (module docstring)."""
    k_exact = Fraction(k)

    def weigh(hungry: Sequence[QueueInfo], r: int) -> dict[str, Fraction]:
        total = sum(q.weight[r] for q in hungry)
        if total <= 0:
            return {q.name: Fraction(0) for q in hungry}
        out: dict[str, Fraction] = {}
        for q in hungry:
            nw = Fraction(q.weight[r], total)
            used = usage.get(q.name)
            nu = Fraction(used[r]) if used is not None else Fraction(0)
            out[q.name] = max(Fraction(0), nw + k_exact * (nw - nu))
        return out

    return weigh
