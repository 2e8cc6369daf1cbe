"""Where kai-stream's created→bound time goes, stage by stage, from its own logs and the harness's pod records.

After a run, before the broker goes, the three topics a pod passes through are read back: the connector's first
``PodObserved`` of the pod on cluster-events (*published*), the processor's ``BindRequested`` on decisions
(*decided*) and the binder's ``PodBound`` on bind-results (*applied*). A record's timestamp is its producer's
wall clock when it was sent; the harness's created and bound times (monotonic) are moved onto the wall clock.
For each phase of the workload ``stage_figures`` gives p50/p99 of each hop's duration:

* created→published: the API server's watch to the connector, its conversion and its send;
* published→decided: the processor's fetch, fold, cycle and send (with any cycle already running);
* decided→applied: the binder's fetch, its API calls and its send;
* applied→seen: the Binding's write reaching the harness's pod watch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from benchmarks.peer_kai.records import PodLedger, percentile
from kai_stream.core.events import BindRequested, PodBound, PodObserved, loads_any
from kai_stream.kafka import Record

HOPS = ("created→published", "published→decided", "decided→applied", "applied→seen")


@dataclass(frozen=True)
class Hop:
    pods: int
    p50_ms: float | None
    p99_ms: float | None


@dataclass
class PodTrail:
    """Wall-clock seconds at which one pod passed each point (None: not seen there)."""

    published: float | None = None
    decided: float | None = None
    applied: float | None = None


def trails(records: Iterable[Record], names: set[str]) -> dict[str, PodTrail]:
    """The first time each pod of ``names`` was published, decided and applied, from the records of the three
    topics (any order); other pods and other records are ignored."""
    found: dict[str, PodTrail] = {}
    for record in records:
        if record.value is None:
            continue
        try:
            event = loads_any(record.value)
        except ValueError:
            continue
        at = record.timestamp / 1000
        if isinstance(event, PodObserved):
            name, point = event.pod.name, "published"
        elif isinstance(event, BindRequested):
            name, point = event.name, "decided"
        elif isinstance(event, PodBound):
            name, point = event.name, "applied"
        else:
            continue
        if name not in names:
            continue
        trail = found.setdefault(name, PodTrail())
        if getattr(trail, point) is None or at < getattr(trail, point):
            setattr(trail, point, at)
    return found


def stage_figures(ledger: PodLedger, found: dict[str, PodTrail], wall_offset: float) -> dict[str, dict[str, Hop]]:
    """Per phase (and ``all``), p50/p99 of each hop in ``HOPS``; ``wall_offset`` = wall clock − harness clock."""
    phases = ["all", *dict.fromkeys(r.phase for r in ledger.pods.values())]
    result: dict[str, dict[str, Hop]] = {}
    for phase in phases:
        hops: dict[str, list[float]] = {hop: [] for hop in HOPS}
        for record in ledger.pods.values():
            if phase != "all" and record.phase != phase:
                continue
            trail = found.get(record.name, PodTrail())
            created = record.created + wall_offset if record.created is not None else None
            seen = record.bound + wall_offset if record.bound is not None else None
            points = (created, trail.published, trail.decided, trail.applied, seen)
            for hop, start, end in zip(HOPS, points, points[1:], strict=False):
                if start is not None and end is not None:
                    hops[hop].append((end - start) * 1000)
        result[phase] = {hop: Hop(len(v), percentile(v, 50), percentile(v, 99)) for hop, v in hops.items()}
    return result
