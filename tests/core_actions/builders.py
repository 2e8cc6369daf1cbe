"""Event builders shared by the shortcut tests: nodes, queues, running and pending one-pod jobs, pending gangs,
and the fold."""

from __future__ import annotations

from kai_stream.core.events import (
    AnyEvent,
    NodeObserved,
    NodeSpec,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
)
from kai_stream.core.state import ClusterState, apply

GIB = 2**30


def node_events(count: int, gpus: int) -> list[AnyEvent]:
    return [
        NodeObserved(
            event_id=f"n{i}",
            ts=0.0,
            node=NodeSpec(
                name=f"n{i:02d}", allocatable=Resources(gpu_milli=gpus * 1000, cpu_milli=64_000, memory=256 * GIB)
            ),
        )
        for i in range(count)
    ]


def fold(events: list[AnyEvent]) -> ClusterState:
    state = ClusterState()
    for event in events:
        apply(state, event, state.offset + 1)
    return state


def running(uid: int, queue: str, node: str, gpu: int, priority_class: str) -> PodObserved:
    pod = PodSpec(
        namespace="t",
        name=f"run-{uid}",
        uid=f"u{uid}",
        queue=queue,
        requests=Resources(gpu_milli=1000, cpu_milli=1000, memory=GIB),
        priority_class=priority_class,
        node_name=node,
        gpu_indices=(gpu,),
        phase="Running",
        created=float(uid),
        started=float(uid),
    )
    return PodObserved(event_id=f"p{uid}", ts=0.0, pod=pod)


def pending(k: int, uid: int, queue: str, gpus: int, priority_class: str) -> PodObserved:
    pod = PodSpec(
        namespace="t",
        name=f"pend-{k}",
        uid=f"u{uid}",
        queue=queue,
        requests=Resources(gpu_milli=gpus * 1000, cpu_milli=1000, memory=GIB),
        priority_class=priority_class,
        created=1000.0 + uid,
    )
    return PodObserved(event_id=f"p{uid}", ts=0.0, pod=pod)


def gang(k: int, uid: int, queue: str, pods: int, gpus: int, priority_class: str) -> list[AnyEvent]:
    """A pending PodGroup ``g<k>`` of ``pods`` pods of ``gpus`` GPUs each (minMember = ``pods``; uids from ``uid``)
    that asks in all what one ``pending`` pod of ``pods * gpus`` GPUs asks (its CPU and memory split evenly)."""
    group = PodGroupSpec(
        namespace="t", name=f"g{k}", queue=queue, min_member=pods, priority_class=priority_class, created=1000.0 + uid
    )
    events: list[AnyEvent] = [PodGroupObserved(event_id=f"g{k}", ts=0.0, pod_group=group)]
    for i in range(pods):
        pod = PodSpec(
            namespace="t",
            name=f"g{k}-{i}",
            uid=f"u{uid + i}",
            queue=queue,
            pod_group=f"g{k}",
            requests=Resources(gpu_milli=gpus * 1000, cpu_milli=1000 // pods, memory=GIB // pods),
            priority_class=priority_class,
            created=1000.0 + uid,
        )
        events.append(PodObserved(event_id=f"p{uid + i}", ts=0.0, pod=pod))
    return events


def queue(name: str, *, parent: str | None = None, gpu_quota: int = -1, gpu_limit: int = -1) -> QueueObserved:
    res = QueueResources(
        gpu=QueueResource(quota=gpu_quota, limit=gpu_limit), cpu=QueueResource(quota=-1), memory=QueueResource(quota=-1)
    )
    return QueueObserved(event_id=f"q{name}", ts=0.0, queue=QueueSpec(name=name, parent=parent, resources=res))
