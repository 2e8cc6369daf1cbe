"""Timings from the API server's pod records and the figures computed from them.

``PodLedger`` is fed the harness's create answers and the pod watch: a pod is *created* when the API server
answered its POST and *bound* when the watch first shows its ``spec.nodeName`` (the Binding landed), both on the
harness's monotonic clock. The kube-apiserver's own timestamps have whole-second resolution, too coarse for a
p50 of tens of milliseconds. A pod deleted while unbound is *evicted*.

``figures`` turns the ledger into what the benchmark prints: time to place all, pods/s, created→bound p50/p99
and pods left pending, for all pods and for each phase.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PodRecord:
    name: str
    phase: str
    created: float | None = None
    bound: float | None = None
    node: str | None = None
    deleted: float | None = None


@dataclass
class PodLedger:
    """Pods of the workload by name (other pods the watch shows are ignored)."""

    pods: dict[str, PodRecord] = field(default_factory=dict)

    def expect(self, name: str, phase: str) -> None:
        self.pods[name] = PodRecord(name, phase)

    def created(self, name: str, at: float) -> None:
        record = self.pods.get(name)
        if record is not None and record.created is None:
            record.created = at

    def observe(self, event: str, pod: dict[str, Any], at: float) -> None:
        record = self.pods.get(pod["metadata"]["name"])
        if record is None:
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if node and record.bound is None:
            record.bound, record.node = at, node
        if event == "DELETED" and record.deleted is None:
            record.deleted = at

    def bound_count(self) -> int:
        return sum(1 for r in self.pods.values() if r.bound is not None)

    def last_bound(self) -> float | None:
        times = [r.bound for r in self.pods.values() if r.bound is not None]
        return max(times) if times else None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 100]) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Figures:
    pods: int
    bound: int
    pending: int
    evicted: int
    time_to_place_s: float | None
    """First create to last bind; None unless every pod was bound."""
    pods_per_s: float | None
    """Pods bound per second, first create to last bind."""
    p50_ms: float | None
    p99_ms: float | None


def figures(records: Iterable[PodRecord]) -> Figures:
    chosen = list(records)
    created = [r.created for r in chosen if r.created is not None]
    pairs = [(r.created, r.bound) for r in chosen if r.bound is not None and r.created is not None]
    latencies = [(done - start) * 1000 for start, done in pairs]
    evicted = sum(1 for r in chosen if r.deleted is not None)
    span = max(done for _, done in pairs) - min(created) if pairs and created else None
    return Figures(
        pods=len(chosen),
        bound=len(pairs),
        pending=sum(1 for r in chosen if r.bound is None and r.deleted is None),
        evicted=evicted,
        time_to_place_s=span if span is not None and len(pairs) == len(chosen) else None,
        pods_per_s=len(pairs) / span if span else None,
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
    )


def figures_by_phase(ledger: PodLedger) -> dict[str, Figures]:
    """``all`` and one entry per phase, in the order phases first appear."""
    phases = list(dict.fromkeys(r.phase for r in ledger.pods.values()))
    result = {"all": figures(ledger.pods.values())}
    for phase in phases:
        result[phase] = figures(r for r in ledger.pods.values() if r.phase == phase)
    return result
