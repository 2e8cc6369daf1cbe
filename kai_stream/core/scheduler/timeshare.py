"""Time-based fair share (KAI ``docs/time-based-fairshare``): queues' historical usage lowers their over-quota weight.

``usage_shares`` reads the fold's ``UsageLedger`` as KAI reads Prometheus: per queue and resource, the usage in the
window, each moment weighted by ``0.5 ** (age / halfLifePeriod)`` (no decay without a half-life), divided by the
cluster capacity over the same window with the same weights. The window is the last ``windowSize`` (sliding) or
the time since the last reset at ``tumblingWindowStartTime + n * windowSize`` (tumbling). Time is sampled per
ledger bucket (``BUCKET_S``): a bucket's weight is taken at its middle (or at ``now`` for the current one), and a
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

from kai_stream.core.config import UsageParams
from kai_stream.core.scheduler.fairshare import RoundWeights
from kai_stream.core.scheduler.framework.info import QueueInfo
from kai_stream.core.usage import BUCKET_S, Integrals, UsageLedger

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


def _bucket_weights(buckets: Sequence[int], params: UsageParams, now: float, start: float) -> dict[int, float]:
    half_life = params.half_life_period_s
    weights: dict[int, float] = {}
    for b in buckets:
        lo, hi = b * BUCKET_S, (b + 1) * BUCKET_S
        inside = 1.0 if start <= lo else max(0.0, (hi - start) / BUCKET_S)
        if half_life is not None:
            inside *= 0.5 ** ((now - min(now, (lo + hi) / 2)) / half_life)
        weights[b] = inside
    return weights


def _weighted(integrals: Integrals, weights: dict[int, float]) -> Usage:
    g = c = m = 0.0
    for b in sorted(integrals):
        w = weights.get(b, 0.0)
        if w > 0.0:
            cell = integrals[b]
            g += cell[0] * w
            c += cell[1] * w
            m += cell[2] * w
    return (g, c, m)


def usage_shares(ledger: UsageLedger, params: UsageParams, now: float, default_queue: str) -> dict[str, Usage]:
    """Per leaf queue (``""`` read as ``default_queue``): decayed usage / decayed capacity in the window, per
    resource; 0 where the capacity integral is 0. Queues without usage are absent."""
    start = min(window_start(params, now), now)
    capacity_integrals = ledger.integrals(None, now, start)
    first, last = int(start // BUCKET_S), int(now // BUCKET_S)
    weights = _bucket_weights(range(first, last + 1), params, now, start)
    capacity = _weighted(capacity_integrals, weights)
    shares: dict[str, Usage] = {}
    for queue in ledger.queues():
        used = _weighted(ledger.integrals(queue, now, start), weights)
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
