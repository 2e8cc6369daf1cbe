"""Cluster state as a fold over events: ``state = fold(events)``, one ``apply`` at a time.

Rules (everything that changes state lives here):

1. State changes only through ``apply(state, event, offset)``; nothing reads a clock. ``state.now`` is the
   largest event time seen.
2. An event at an offset not above ``state.offset`` is a re-delivery and changes nothing. An observation or
   outcome whose ``event_id`` is one of the last ``SEEN_IDS`` ids this state folded is a duplicate (a producer's
   retry, a re-published record or a forgery) and changes nothing but ``state.offset``. The window is counted
   in events, not time, so what a state remembers is a function of its events alone; it bounds memory at
   ``SEEN_IDS`` ids per state. Decisions carry no event id and are never de-duplicated here.
3. The scheduler's own decisions are folded too: a ``BindRequested`` is an *assumed* placement until the
   connector observes the pod on its node (or a ``BindFailed`` withdraws it; one with ``pod_gone`` also
   forgets the pod, which the API server no longer has); an ``EvictionRequested``
   marks the pod as releasing; a ``PodPending`` records the last reason given, so an unchanged reason is
   not re-emitted. A ``BindFailed`` that leaves the pod (not ``pod_gone``) is counted in ``bind_failures``
   (consecutive failures, the last one's event time and error) until the pod is bound (``PodBound``, or observed
   on a node) or forgotten; the scheduler backs the pod off from that record (``framework/backoff.py``).
   An observed pod or node that carries a ``resource_version`` not above the one the state holds for that
   object (pods by uid, nodes by name and uid) is stale (a re-list's or a re-delivered copy) and is ignored, so
   it can never undo a newer observation or a bind folded from ``PodBound``. The version is forgotten with the
   object.
4. An evicted pod keeps its resources until it is gone: ``PodEvicted`` (the API accepted the eviction) leaves
   it releasing, as does a ``deletionTimestamp`` (``PodSpec.terminating``); only ``PodRemoved`` (or a terminal
   phase) frees them. A preemptor placed on them stays pipelined until then.
5. Iteration order is never taken from a dict: readers sort (creation time, then uid / name).
6. ``ClusterState.derived`` holds what the fold keeps beside the state for the scheduler (``Derived``): the live
   pods per job, Succeeded counts, and the snapshots parked between cycles, to which ``apply`` reports the keys
   each event touched (the snapshots keep their own dirty sets). It is a cache: excluded from equality, dropped
   on copy or pickle and before a batch that outgrows every parked snapshot (``Derived.release_if_outgrown``),
   then rebuilt from ``pods``; never a source of decisions.
7. ``ClusterState.usage`` integrates what each queue's bound pods hold, and the nodes' capacity, over event time
   (``kai_stream.core.usage``): every pod and node change is reported to it at ``state.now``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

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
from kai_stream.core.usage import UsageLedger

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
class BindFailures:
    """A pod's binds that failed in a row: how many, the last failure's event time and its error."""

    count: int
    ts: float
    error: str


@dataclass(frozen=True)
class Pipelined:
    node: str
    gpu_indices: tuple[int, ...]
    decision_id: str


SEEN_IDS = 32_768
"""How many of the most recent event ids a state remembers to drop duplicates (rule 2)."""


class SeenIds:
    """The last ``SEEN_IDS`` event ids folded, oldest first (a deque for the order, a set to look up)."""

    __slots__ = ("ids", "order")

    def __init__(self) -> None:
        self.order: deque[str] = deque()
        self.ids: set[str] = set()

    def add(self, event_id: str) -> bool:
        """Remember ``event_id``; False when it is already remembered (a duplicate)."""
        if event_id in self.ids:
            return False
        self.ids.add(event_id)
        self.order.append(event_id)
        if len(self.order) > SEEN_IDS:
            self.ids.discard(self.order.popleft())
        return True


NODE_MARK = "\0node/"
"""Prefix of a node name among the keys ``apply`` reports (job keys never start with it): that node's spec or GPUs
changed."""


class Parked(Protocol):
    """A pool's snapshot kept between cycles (``framework/reuse.py``): told what each folded event touched."""

    def touched(self, key: str | None) -> None:
        """Job ``key`` (or ``NODE_MARK`` + a node name) changed; None: something every job depends on changed
        (queues, priority classes, topologies or foreign pods)."""

    def outgrown(self, touches: int) -> bool:
        """Whether ``touches`` more touched jobs would leave this snapshot to be built anew by the next cycle."""


def _live(pod: PodSpec) -> bool:
    return pod.phase != "Succeeded" and pod.phase != "Failed"


class Derived:
    """Indexes the fold maintains for the scheduler snapshot; a cache, never part of the state's value.

    * ``by_job`` — per job key, the live (not Succeeded/Failed) managed pods, by uid;
    * ``unmanaged`` — live pods of other schedulers; ``succeeded`` — Succeeded pods per job key;
    * ``parked`` — per pool, the snapshot kept between cycles (``framework/reuse.py``), to which ``touched``
      reports each key the fold touched.

    ``indexed`` is the pod object each index entry came from; None means "not in sync" (a copy, or a state
    whose ``pods`` were written outside ``apply``): ``sync`` rebuilds from ``state.pods``.
    """

    __slots__ = ("by_job", "indexed", "parked", "succeeded", "unmanaged")

    def __init__(self, synced: bool = True) -> None:
        self.indexed: dict[str, PodSpec] | None = {} if synced else None
        self.by_job: dict[str, dict[str, PodSpec]] = {}
        self.unmanaged: dict[str, PodSpec] = {}
        self.succeeded: dict[str, int] = {}
        self.parked: dict[str, Parked] = {}

    def __reduce__(self) -> tuple[type[Derived], tuple[bool]]:
        return (Derived, (False,))

    def sync(self, pods: dict[str, PodSpec]) -> None:
        """Make the pod indexes match ``pods`` (cheap identity check; full rebuild when they drifted)."""
        indexed = self.indexed
        if indexed is not None and len(indexed) == len(pods):
            get = indexed.get
            if all(get(uid) is pod for uid, pod in pods.items()):
                return
        self.indexed = {}
        self.by_job, self.unmanaged, self.succeeded = {}, {}, {}
        self.parked.clear()
        for pod in pods.values():
            self.pod_changed(None, pod)

    def release(self) -> None:
        """Drop the indexes and the parked snapshots: the fold stops keeping them, and the next ``sync`` (a cycle's
        snapshot build) makes them again from ``state.pods`` in one pass."""
        self.indexed = None
        self.by_job, self.unmanaged, self.succeeded = {}, {}, {}
        self.parked.clear()

    def release_if_outgrown(self, touches: int) -> bool:
        """Before folding a batch of up to ``touches`` events: when a snapshot is parked and the batch would outgrow
        every parked snapshot (``Parked.outgrown``: the next cycle builds the whole snapshot anyway), ``release``.
        One ``sync`` pass then makes the indexes for less than keeping them, and the snapshots' dirty keys, event by
        event. True when released. The indexes are a cache: what a cycle decides is the same either way."""
        parked = self.parked
        if self.indexed is None or not parked or not all(parked[pool].outgrown(touches) for pool in sorted(parked)):
            return False
        self.release()
        return True

    def touched(self, key: str | None) -> None:
        """Report ``key`` touched (``Parked.touched``) to every parked snapshot."""
        for snapshot in self.parked.values():
            snapshot.touched(key)

    def pod_changed(self, old: PodSpec | None, new: PodSpec | None) -> None:
        indexed = self.indexed
        if indexed is None:
            return
        if (
            old is not None
            and new is not None
            and old.managed
            and new.managed
            and old.namespace == new.namespace
            and old.pod_group == new.pod_group
            and (old.pod_group or old.name == new.name)
            and _live(old)
            and _live(new)
        ):
            indexed[new.uid] = new
            key = job_key_of(new)
            self.by_job[key][new.uid] = new
            if self.parked:
                self.touched(key)
            return
        if old is not None:
            indexed.pop(old.uid, None)
            key = job_key_of(old)
            if not _live(old):
                if old.phase == "Succeeded":
                    left = self.succeeded.get(key, 0) - 1
                    if left > 0:
                        self.succeeded[key] = left
                    else:
                        self.succeeded.pop(key, None)
            elif not old.managed:
                self.unmanaged.pop(old.uid, None)
            else:
                members = self.by_job.get(key)
                if members is not None:
                    members.pop(old.uid, None)
                    if not members:
                        del self.by_job[key]
        if new is not None:
            indexed[new.uid] = new
            key = job_key_of(new)
            if not _live(new):
                if new.phase == "Succeeded":
                    self.succeeded[key] = self.succeeded.get(key, 0) + 1
            elif not new.managed:
                self.unmanaged[new.uid] = new
            else:
                self.by_job.setdefault(key, {})[new.uid] = new
        if self.parked:
            if (old is not None and not old.managed) or (new is not None and not new.managed):
                self.touched(None)
                return
            if old is not None:
                self.touched(job_key_of(old))
            if new is not None:
                self.touched(job_key_of(new))


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
    bind_failures: dict[str, BindFailures] = field(default_factory=dict)
    """Per pod (uid): its consecutive failed binds since it was last bound (rule 3)."""
    versions: dict[str, int] = field(default_factory=dict)
    """The resourceVersion of the last observation folded, per pod (``pod/<uid>``) and node (``node/<name>/<uid>``)."""
    usage: UsageLedger = field(default_factory=UsageLedger, repr=False)
    """Queue usage and cluster capacity over event time (rule 7)."""
    seen: SeenIds = field(default_factory=SeenIds, compare=False, repr=False)
    """Recent event ids (rule 2); excluded from equality: it changes no decision, only which records count."""
    derived: Derived = field(default_factory=Derived, compare=False, repr=False)

    def pod_by_key(self, namespace: str, name: str) -> PodSpec | None:
        for pod in self.pods.values():
            if pod.namespace == namespace and pod.name == name:
                return pod
        return None


def _pending_signature(decision: PodPending) -> str:
    return pending_signature(decision.code, decision.reason, decision.predicates)


def pending_signature(code: str, reason: str, predicates: dict[str, int], counts: str | None = None) -> str:
    """What must change for a new ``PodPending`` on the same pod to be worth emitting. ``counts``: the
    ``predicate_counts`` of ``predicates`` when the caller already has it (many reasons share one count)."""
    if counts is None:
        counts = predicate_counts(predicates)
    return f"{code}|{reason}|{counts}"


def predicate_counts(predicates: dict[str, int]) -> str:
    """The per-predicate node counts part of ``pending_signature``."""
    return ",".join(f"{k}={v}" for k, v in sorted(predicates.items()))


def job_key_of(pod: PodSpec) -> str:
    """The job a pod belongs to: its pod group, or itself."""
    return f"{pod.namespace}/{pod.pod_group}" if pod.pod_group else f"{pod.namespace}/{pod.name}"


def _group_changed(state: ClusterState, uid: str, ts: float) -> None:
    pod = state.pods.get(uid)
    if pod is not None:
        state.group_changed[job_key_of(pod)] = ts


UNTOUCHED = ""
"""What an event case of ``apply`` reports when it touched nothing (job keys and node marks are never empty)."""


def _pod_job(state: ClusterState, uid: str) -> str:
    """The key to report when a record of pod ``uid`` the snapshot reads changed: its job, or ``UNTOUCHED`` for an
    unknown pod (or when no snapshot is parked, so nobody is told)."""
    if state.derived.parked:
        pod = state.pods.get(uid)
        if pod is not None:
            return job_key_of(pod)
    return UNTOUCHED


def _usage(state: ClusterState, uid: str, pod: PodSpec | None) -> None:
    """Tell the usage ledger what pod ``uid`` is now (rule 7)."""
    queue = ""
    node = None
    if pod is not None:
        queue = pod.queue
        if not queue and pod.pod_group:
            group = state.pod_groups.get(f"{pod.namespace}/{pod.pod_group}")
            queue = group.queue if group is not None else ""
        node = state.nodes.get(pod.node_name) if pod.node_name is not None else None
    state.usage.pod_changed(uid, queue, pod, node, state.now)


def _observe_pod(state: ClusterState, pod: PodSpec, ts: float) -> None:
    previous = state.pods.get(pod.uid)
    if previous is None or (previous.node_name, previous.phase) != (pod.node_name, pod.phase):
        state.group_changed[job_key_of(pod)] = ts
    state.pods[pod.uid] = pod
    state.derived.pod_changed(previous, pod)
    _usage(state, pod.uid, pod)
    state.evicted.pop(pod.uid, None)
    if pod.node_name is not None:
        state.assumed.pop(pod.uid, None)
        state.pipelined.pop(pod.uid, None)
        state.last_pending.pop(pod.uid, None)
        state.bind_failures.pop(pod.uid, None)
    if pod.phase in ("Succeeded", "Failed") or (pod.node_name is None and previous is not None):
        state.evicting.pop(pod.uid, None)
        state.evicting_for.pop(pod.uid, None)


def _newer(state: ClusterState, key: str, version: int | None) -> bool:
    return newer_version(state.versions, key, version)


def newer_version(versions: dict[str, int], key: str, version: int | None) -> bool:
    """Whether an observation at ``version`` of object ``key`` is newer than the one ``versions`` holds (rule 2),
    and if so hold it. The audit's invariant checker judges records by this same rule."""
    if version is None:
        return True
    held = versions.get(key)
    if held is not None and version <= held:
        return False
    versions[key] = version
    return True


def _node_key(node: NodeSpec) -> str:
    return f"node/{node.name}/{node.uid}"


def _forget_pod(state: ClusterState, uid: str) -> None:
    state.versions.pop(f"pod/{uid}", None)
    previous = state.pods.pop(uid, None)
    if previous is not None:
        state.derived.pod_changed(previous, None)
        _usage(state, uid, None)
    state.assumed.pop(uid, None)
    state.pipelined.pop(uid, None)
    state.evicting.pop(uid, None)
    state.evicting_for.pop(uid, None)
    state.last_pending.pop(uid, None)
    state.bind_failures.pop(uid, None)


def _gpu_view(gpus: tuple[GpuDevice, ...] | None) -> tuple[tuple[int, str, int, bool, str], ...] | None:
    """What the scheduler snapshot reads of a node's GPUs (not the utilisation or temperature readings)."""
    if gpus is None:
        return None
    return tuple((d.index, d.uuid, d.memory_mib, d.healthy, d.reason) for d in gpus)


def apply(state: ClusterState, event: AnyEvent, offset: int | None = None) -> bool:
    """Fold one event into ``state`` in place. Returns False (and changes nothing) for a re-delivery."""
    if offset is not None:
        if offset <= state.offset:
            return False
        state.offset = offset
    event_id: str | None = getattr(event, "event_id", None)
    if event_id is not None and not state.seen.add(event_id):
        return False
    state.now = max(state.now, event.ts)
    derived = state.derived
    touched: str | None = UNTOUCHED
    match event:
        case NodeObserved(node=node, resource_version=version):
            if not _newer(state, _node_key(node), version):
                return False
            held = state.nodes.get(node.name)
            if held is not None and held.uid != node.uid:
                state.versions.pop(_node_key(held), None)
            if derived.parked and state.nodes.get(node.name) != node:
                touched = NODE_MARK + node.name
            state.nodes[node.name] = node
            state.usage.node_changed(node.name, node, state.now)
        case NodeRemoved(name=name):
            removed = state.nodes.pop(name, None)
            state.usage.node_changed(name, None, state.now)
            if removed is not None:
                state.versions.pop(_node_key(removed), None)
            state.gpus.pop(name, None)
            touched = NODE_MARK + name
        case GpuHealthObserved(node=node_name, gpus=gpus):
            if derived.parked and _gpu_view(state.gpus.get(node_name)) != _gpu_view(gpus):
                touched = NODE_MARK + node_name
            state.gpus[node_name] = gpus
        case PodObserved(pod=pod, resource_version=version):
            if not _newer(state, f"pod/{pod.uid}", version):
                return False
            _observe_pod(state, pod, event.ts)
        case PodRemoved(uid=uid):
            touched = _pod_job(state, uid)
            _group_changed(state, uid, event.ts)
            _forget_pod(state, uid)
        case QueueObserved(queue=queue):
            if derived.parked and state.queues.get(queue.name) != queue:
                touched = None
            state.queues[queue.name] = queue
        case QueueRemoved(name=name):
            state.queues.pop(name, None)
            touched = None
        case PodGroupObserved(pod_group=group):
            key = f"{group.namespace}/{group.name}"
            if derived.parked and state.pod_groups.get(key) != group:
                touched = key
            state.pod_groups[key] = group
        case PodGroupRemoved(namespace=namespace, name=name):
            key = f"{namespace}/{name}"
            state.pod_groups.pop(key, None)
            touched = key
        case PriorityClassObserved(priority_class=priority_class):
            state.priority_classes[priority_class.name] = priority_class
            touched = None
        case TopologyObserved(topology=topology):
            state.topologies[topology.name] = topology
            touched = None
        case Tick():
            pass
        case BindRequested(uid=uid, node=node, gpu_indices=gpu_indices, decision_id=decision_id, ts=ts):
            state.assumed[uid] = Assumed(node, gpu_indices, decision_id, ts)
            state.pipelined.pop(uid, None)
            state.last_pending.pop(uid, None)
            touched = _pod_job(state, uid)
        case PodPipelined(uid=uid, node=node, gpu_indices=gpu_indices, decision_id=decision_id):
            state.pipelined[uid] = Pipelined(node, gpu_indices, decision_id)
            state.last_pending.pop(uid, None)
            touched = _pod_job(state, uid)
        case EvictionRequested(uid=uid, decision_id=decision_id, preemptor=preemptor):
            state.evicting[uid] = decision_id
            if preemptor:
                state.evicting_for[uid] = preemptor
            touched = _pod_job(state, uid)
        case PodPending(uid=uid):
            state.last_pending[uid] = _pending_signature(event)
            if state.pipelined.pop(uid, None) is not None:
                touched = _pod_job(state, uid)
        case PodBound(uid=uid, node=node, gpu_indices=gpu_indices):
            bound = state.pods.get(uid)
            rebound = bound is not None and bound.node_name is None
            if bound is not None and rebound:
                state.pods[uid] = bound.model_copy(
                    update={
                        "node_name": node,
                        "gpu_indices": gpu_indices or None,
                        "phase": "Running",
                        "started": bound.started if bound.started is not None else event.ts,
                    }
                )
                derived.pod_changed(bound, state.pods[uid])
                _usage(state, uid, state.pods[uid])
                _group_changed(state, uid, event.ts)
            state.bind_failures.pop(uid, None)
            if state.assumed.pop(uid, None) is not None or rebound:
                touched = _pod_job(state, uid)
        case BindFailed(uid=uid, pod_gone=gone, error=error):
            state.assumed.pop(uid, None)
            touched = _pod_job(state, uid)
            if gone:
                _group_changed(state, uid, event.ts)
                _forget_pod(state, uid)
            elif uid in state.pods:
                failed = state.bind_failures.get(uid)
                state.bind_failures[uid] = BindFailures(failed.count + 1 if failed else 1, event.ts, error)
        case PodEvicted(uid=uid, decision_id=decision_id):
            state.evicted[uid] = decision_id
            if uid in state.pods and state.evicting.get(uid) is None:
                state.evicting[uid] = decision_id
                touched = _pod_job(state, uid)
        case EvictionFailed(uid=uid):
            released = state.evicting.pop(uid, None) is not None
            if state.evicting_for.pop(uid, None) is not None or released:
                touched = _pod_job(state, uid)
    if touched != UNTOUCHED:
        derived.touched(touched)
    return True


def fold(events: Iterable[AnyEvent], state: ClusterState | None = None) -> ClusterState:
    """Fold events (offsets 0, 1, 2 … after the state's own) into a new or given state."""
    state = state if state is not None else ClusterState()
    for event in events:
        apply(state, event, state.offset + 1)
    return state
