"""A small hand-built history (2 nodes x 4 GPUs, queues a and b, one reclaim) and its hand-computed figures.

Timeline (GPUs in use): p1 (a, 2 GPUs) pending at 0, bound on n1 at 10, done at 110; p2 (b, 4 GPUs) pending
at 0, bound on n2 at 30, reclaimed at 50 for p3, pending again, re-bound at 150, done at 200; p3 (a, 4 GPUs)
pending at 40, bound on n2 at 50, done at 150. Fair share: a 4 / b 4 from 0, a 6 / b 2 from 40.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kai_stream.core.events import (
    BindRequested,
    EvictionRequested,
    FairShareRecorded,
    Model,
    NodeObserved,
    NodeSpec,
    PodBound,
    PodEvicted,
    PodObserved,
    PodPending,
    PodRemoved,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueShare,
    QueueSpec,
    Resources,
    stable_id,
)
from kai_stream.history.schema import event_row, write_segment

GPU = {"p1": 2000, "p2": 4000, "p3": 4000}
QUEUE = {"p1": "a", "p2": "b", "p3": "a"}


def _pod(name: str, ts: float, node: str | None = None, phase: str = "Pending") -> PodObserved:
    spec = PodSpec(
        namespace="default",
        name=name,
        uid=name,
        queue=QUEUE[name],
        pod_group=f"j{name[1]}",
        requests=Resources(gpu_milli=GPU[name]),
        node_name=node,
        phase=phase,
        created=ts,
    )
    return PodObserved(event_id=stable_id(name, str(ts), phase), ts=ts, pod=spec)


def _common(name: str, ts: float, kind: str, action: str = "allocate") -> dict[str, Any]:
    return {
        "decision_id": stable_id(name, str(ts), kind),
        "ts": ts,
        "input_offset": 0,
        "config_hash": "h",
        "code_version": "t",
        "action": action,
        "namespace": "default",
        "name": name,
        "uid": name,
        "job": f"default/j{name[1]}",
        "queue": QUEUE[name],
    }


def _bind(name: str, ts: float, node: str) -> list[Model]:
    decision = BindRequested(node=node, **_common(name, ts, "bind"))
    bound = PodBound(
        event_id=stable_id(name, str(ts), "bound"),
        ts=ts,
        decision_id=decision.decision_id,
        namespace="default",
        name=name,
        uid=name,
        node=node,
    )
    return [decision, bound]


def _done(name: str, ts: float, node: str) -> list[Model]:
    removed = PodRemoved(event_id=stable_id(name, str(ts), "removed"), ts=ts, namespace="default", name=name, uid=name)
    return [_pod(name, ts, node, "Succeeded"), removed]


def _pending(name: str, ts: float, code: str) -> PodPending:
    return PodPending(code=code, **_common(name, ts, f"pending-{code}"))


def _share(ts: float, a: int, b: int) -> FairShareRecorded:
    def q(name: str, fair: int) -> QueueShare:
        return QueueShare(
            queue=name,
            fair_share=Resources(gpu_milli=fair),
            deserved=Resources(gpu_milli=4000),
            allocated=Resources(),
        )

    return FairShareRecorded(ts=ts, input_offset=0, config_hash="h", queues=(q("a", a), q("b", b)))


def events() -> list[Model]:
    nodes: list[Model] = [
        NodeObserved(event_id=n, ts=0.0, node=NodeSpec(name=n, allocatable=Resources(gpu_milli=4000)))
        for n in ("n1", "n2")
    ]
    queues: list[Model] = [
        QueueObserved(
            event_id=f"q{n}",
            ts=0.0,
            queue=QueueSpec(name=n, resources=QueueResources(gpu=QueueResource(quota=4000))),
        )
        for n in ("a", "b")
    ]
    eviction = EvictionRequested(node="n2", preemptor="default/j3", **_common("p2", 50.0, "evict", "reclaim"))
    evicted = PodEvicted(
        event_id="ev2", ts=50.0, decision_id=eviction.decision_id, namespace="default", name="p2", uid="p2"
    )
    return [
        *nodes,
        *queues,
        _pod("p1", 0.0),
        _pod("p2", 0.0),
        _pending("p2", 0.0, "NoNodeFits"),
        _share(0.0, 4000, 4000),
        *_bind("p1", 10.0, "n1"),
        *_bind("p2", 30.0, "n2"),
        _pod("p3", 40.0),
        _pending("p3", 40.0, "NoNodeFits"),
        _share(40.0, 6000, 2000),
        eviction,
        evicted,
        _pod("p2", 50.0),
        _pending("p2", 50.0, "QueueOverLimit"),
        *_bind("p3", 50.0, "n2"),
        *_done("p1", 110.0, "n1"),
        *_done("p3", 150.0, "n2"),
        *_bind("p2", 150.0, "n2"),
        *_done("p2", 200.0, "n2"),
    ]


def topic_of(event: Model) -> str:
    kind = getattr(event, "type", "")
    if kind in ("BindRequested", "EvictionRequested", "PodPending", "PodPipelined", "FairShareRecorded"):
        return "decisions"
    return "cluster-events"


def write_history(directory: Path, *, split: int = 2, results: str = "none") -> None:
    """Write the events as Parquet segments by topic (``split`` segments per topic, to test multi-file scans).

    ``results``: "none" (outcomes on cluster-events only), "copy" (also on bind-results, as the trace simulator
    writes them) or "only" (``PodBound`` on bind-results only, not forwarded to cluster-events).
    """
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for event in events():
        topics = [topic_of(event)]
        if results != "none" and isinstance(event, PodBound | PodEvicted):
            topics = (
                ["bind-results"] if results == "only" and isinstance(event, PodBound) else [*topics, "bind-results"]
            )
        for topic in topics:
            rows = by_topic.setdefault(topic, [])
            if hasattr(event, "input_offset"):
                event = event.model_copy(update={"input_offset": len(by_topic.get("cluster-events", [])) - 1})
            rows.append(event_row(topic, 0, len(rows), event))
    for topic, rows in by_topic.items():
        size = -(-len(rows) // split)
        for i in range(0, len(rows), size):
            write_segment(rows[i : i + size], directory / topic / "0", f"{i:020d}")
