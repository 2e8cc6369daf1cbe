"""Cluster state as a fold over events: ``state = fold(events)``, one ``apply`` at a time.

Rules (everything that changes state lives here):

1. State changes only through ``apply(state, event, offset)``; nothing reads a clock. ``state.now`` is the
   largest event time seen.
2. An event at an offset not above ``state.offset`` is a re-delivery and changes nothing.
3. The scheduler's own decisions are folded too: a ``BindRequested`` is an *assumed* placement until the
   connector observes the pod on its node (or a ``BindFailed`` withdraws it); an ``EvictionRequested``
   marks the pod as releasing; a ``PodPending`` records the last reason given, so an unchanged reason is
   not re-emitted.
4. Iteration order is never taken from a dict: readers sort (creation time, then uid / name).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kai_stream.core.events import (
    AnyEvent,
    BindFailed,
    BindRequested,
    EvictionFailed,
    EvictionRequested,
    GpuDevice,
    GpuHealthObserved,
    NodeObserved,
    NodeRemoved,
    NodeSpec,
    PodBound,
    PodEvicted,
    PodGroupObserved,
    PodGroupRemoved,
    PodGroupSpec,
    PodObserved,
    PodPending,
    PodPipelined,
    PodRemoved,
    PodSpec,
    PriorityClassObserved,
    PriorityClassSpec,
    QueueObserved,
    QueueRemoved,
    QueueSpec,
    Tick,
    TopologyObserved,
    TopologySpec,
)

BUILTIN_PRIORITY_CLASSES: dict[str, PriorityClassSpec] = {
    "train": PriorityClassSpec(name="train", value=50, preemptible=True),
    "build-preemptible": PriorityClassSpec(name="build-preemptible", value=75, preemptible=True),
    "build": PriorityClassSpec(name="build", value=100, preemptible=False),
    "inference": PriorityClassSpec(name="inference", value=125, preemptible=False),
}


@dataclass(frozen=True)
class Assumed:
    """A placement the scheduler decided and the cluster has not confirmed yet."""

    node: str
    gpu_indices: tuple[int, ...]
    decision_id: str
    ts: float


@dataclass(frozen=True)
class Pipelined:
    node: str
    gpu_indices: tuple[int, ...]
    decision_id: str


@dataclass
class ClusterState:
    """Everything the scheduler knows, built only from events."""

    offset: int = -1
    now: float = 0.0
    nodes: dict[str, NodeSpec] = field(default_factory=dict)
    gpus: dict[str, tuple[GpuDevice, ...]] = field(default_factory=dict)
    pods: dict[str, PodSpec] = field(default_factory=dict)
    queues: dict[str, QueueSpec] = field(default_factory=dict)
    pod_groups: dict[str, PodGroupSpec] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClassSpec] = field(
        default_factory=lambda: dict(BUILTIN_PRIORITY_CLASSES)
    )
    topologies: dict[str, TopologySpec] = field(default_factory=dict)
    assumed: dict[str, Assumed] = field(default_factory=dict)
    pipelined: dict[str, Pipelined] = field(default_factory=dict)
    evicting: dict[str, str] = field(default_factory=dict)
    last_pending: dict[str, str] = field(default_factory=dict)
    evicted: dict[str, str] = field(default_factory=dict)
    group_changed: dict[str, float] = field(default_factory=dict)
    evicting_for: dict[str, str] = field(default_factory=dict)
    """Per releasing pod (uid) evicted for a preemptor: that preemptor's job key, until the pod is gone."""
    """Per job key ("ns/podgroup", or "ns/pod" for a lone pod): event time its set of pods last changed."""

    def pod_by_key(self, namespace: str, name: str) -> PodSpec | None:
        for pod in self.pods.values():
            if pod.namespace == namespace and pod.name == name:
                return pod
        return None


def _pending_signature(decision: PodPending) -> str:
    predicates = ",".join(f"{k}={v}" for k, v in sorted(decision.predicates.items()))
    return f"{decision.code}|{decision.reason}|{predicates}"


def pending_signature(decision: PodPending) -> str:
    """What must change for a new ``PodPending`` on the same pod to be worth emitting."""
    return _pending_signature(decision)


def job_key_of(pod: PodSpec) -> str:
    """The job a pod belongs to: its pod group, or itself."""
    return f"{pod.namespace}/{pod.pod_group}" if pod.pod_group else f"{pod.namespace}/{pod.name}"


def _group_changed(state: ClusterState, uid: str, ts: float) -> None:
    pod = state.pods.get(uid)
    if pod is not None:
        state.group_changed[job_key_of(pod)] = ts


def _observe_pod(state: ClusterState, pod: PodSpec, ts: float) -> None:
    previous = state.pods.get(pod.uid)
    if previous is None or (previous.node_name, previous.phase) != (pod.node_name, pod.phase):
        state.group_changed[job_key_of(pod)] = ts
    state.pods[pod.uid] = pod
    state.evicted.pop(pod.uid, None)
    if pod.node_name is not None:
        state.assumed.pop(pod.uid, None)
        state.pipelined.pop(pod.uid, None)
        state.last_pending.pop(pod.uid, None)
    if pod.phase in ("Succeeded", "Failed"):
        state.evicting.pop(pod.uid, None)
        state.evicting_for.pop(pod.uid, None)


def _forget_pod(state: ClusterState, uid: str) -> None:
    state.pods.pop(uid, None)
    state.assumed.pop(uid, None)
    state.pipelined.pop(uid, None)
    state.evicting.pop(uid, None)
    state.evicting_for.pop(uid, None)
    state.last_pending.pop(uid, None)


def apply(state: ClusterState, event: AnyEvent, offset: int | None = None) -> bool:
    """Fold one event into ``state`` in place. Returns False (and changes nothing) for a re-delivery."""
    if offset is not None:
        if offset <= state.offset:
            return False
        state.offset = offset
    state.now = max(state.now, event.ts)
    match event:
        case NodeObserved(node=node):
            state.nodes[node.name] = node
        case NodeRemoved(name=name):
            state.nodes.pop(name, None)
            state.gpus.pop(name, None)
        case GpuHealthObserved(node=node_name, gpus=gpus):
            state.gpus[node_name] = gpus
        case PodObserved(pod=pod):
            _observe_pod(state, pod, event.ts)
        case PodRemoved(uid=uid):
            _group_changed(state, uid, event.ts)
            _forget_pod(state, uid)
        case QueueObserved(queue=queue):
            state.queues[queue.name] = queue
        case QueueRemoved(name=name):
            state.queues.pop(name, None)
        case PodGroupObserved(pod_group=group):
            state.pod_groups[f"{group.namespace}/{group.name}"] = group
        case PodGroupRemoved(namespace=namespace, name=name):
            state.pod_groups.pop(f"{namespace}/{name}", None)
        case PriorityClassObserved(priority_class=priority_class):
            state.priority_classes[priority_class.name] = priority_class
        case TopologyObserved(topology=topology):
            state.topologies[topology.name] = topology
        case Tick():
            pass
        case BindRequested(uid=uid, node=node, gpu_indices=gpu_indices, decision_id=decision_id, ts=ts):
            state.assumed[uid] = Assumed(node, gpu_indices, decision_id, ts)
            state.pipelined.pop(uid, None)
            state.last_pending.pop(uid, None)
        case PodPipelined(uid=uid, node=node, gpu_indices=gpu_indices, decision_id=decision_id):
            state.pipelined[uid] = Pipelined(node, gpu_indices, decision_id)
            state.last_pending.pop(uid, None)
        case EvictionRequested(uid=uid, decision_id=decision_id, preemptor=preemptor):
            state.evicting[uid] = decision_id
            if preemptor:
                state.evicting_for[uid] = preemptor
        case PodPending(uid=uid):
            state.last_pending[uid] = _pending_signature(event)
            state.pipelined.pop(uid, None)
        case PodBound(uid=uid, node=node, gpu_indices=gpu_indices):
            bound = state.pods.get(uid)
            if bound is not None and bound.node_name is None:
                state.pods[uid] = bound.model_copy(
                    update={
                        "node_name": node,
                        "gpu_indices": gpu_indices or None,
                        "phase": "Running",
                        "started": bound.started if bound.started is not None else event.ts,
                    }
                )
                _group_changed(state, uid, event.ts)
            state.assumed.pop(uid, None)
        case BindFailed(uid=uid):
            state.assumed.pop(uid, None)
        case PodEvicted(uid=uid, decision_id=decision_id):
            state.evicted[uid] = decision_id
            _group_changed(state, uid, event.ts)
            _forget_pod(state, uid)
        case EvictionFailed(uid=uid):
            state.evicting.pop(uid, None)
            state.evicting_for.pop(uid, None)
    return True


def fold(events: Iterable[AnyEvent], state: ClusterState | None = None) -> ClusterState:
    """Fold events (offsets 0, 1, 2 … after the state's own) into a new or given state."""
    state = state if state is not None else ClusterState()
    for event in events:
        apply(state, event, state.offset + 1)
    return state
