"""The promises a whole recorded log must keep, checked at every record: ``kai-stream audit invariants``.

Pure: it reads decoded records in log order (a pool's cluster-events and decisions merged by ``input_offset``:
a decision follows the event it was decided after) and names the first record that breaks one of:

* **capacity** — no node's GPUs (per device index, whole and fractional; a device shared by fractions counts
  as a whole GPU against the node; a fraction without device indices, as a pod placed before kai-stream has,
  counts by its share alone), CPU or memory over its allocatable, counting terminating pods (evicted or
  deleted, not yet removed) until they are removed. Judged three ways:

  - *observed*: what the cluster says is on the node (``PodObserved`` with a node, ``PodBound``), until
    ``PodRemoved``, a terminal phase, or the pod observed unbound again (the trace simulator re-queues an
    evicted pod under its uid);
  - *decided*: the same plus the binds the scheduler decided and the cluster has not confirmed (a bind must
    fit next to every pod still on the node, terminating ones included);
  - *reserved*: binds and pipelined reservations (``PodPipelined`` not yet bound, pending or removed) next to
    the pods that are not releasing (a pipelined pod may wait on capacity that evicted pods still hold).

  A cycle's decisions are one commit: the nodes they touch are judged once the cycle is complete (the first
  violating node is reported at the last decision of the cycle that touched it); events are judged one by one.
* **bound twice** — a second bind of one uid without a removal between: two ``PodBound`` (not ``already``), a
  ``PodBound`` onto another node than the one the pod is on, or a ``BindRequested`` for a pod that is bound or
  has a bind outstanding.
* **partial gang** — after the cycle (the decisions sharing an ``input_offset``) that bound, pipelined or
  evicted members of a job, ``0 < members < minMember``, counting members placed and not releasing,
  pipelined, or Succeeded.
* **unrecorded eviction** — a ``PodEvicted`` with no ``EvictionRequested`` for that uid before it.
* **unaccounted pod** — at the end, a created pod the scheduler said nothing about although a cycle ran after it
  needed a word (created, or its bind failed). Accounted pods are bound (or a bind is decided), pending with a
  reason (``PodPending``), pipelined, evicted by a recorded decision, or deleted by the user; a pod no cycle has
  seen yet is counted as ``undecided`` and is not a violation.

The hash chain is the fifth promise; ``check_history`` verifies it with ``audit.verify_chain``.
Cross-pool effects are not judged: a pod counts against the nodes of its own pool's log.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from kai_stream.audit import verify_chain
from kai_stream.core.events import (
    AnyEvent,
    BindFailed,
    BindRequested,
    Decision,
    EvictionFailed,
    EvictionRequested,
    NodeObserved,
    NodeRemoved,
    NodeSpec,
    PodBound,
    PodEvicted,
    PodGroupObserved,
    PodGroupRemoved,
    PodObserved,
    PodPending,
    PodPipelined,
    PodRemoved,
    PodSpec,
)
from kai_stream.core.state import SeenIds, newer_version
from kai_stream.history.reader import History, PoolLog

__all__ = [
    "InvariantReport",
    "Position",
    "Violation",
    "check_history",
    "check_records",
    "pool_records",
]

UNIT = 1000
EVENTS_TOPIC = "cluster-events"
DECISIONS_TOPIC = "decisions"
Placement = tuple[str, tuple[int, ...] | None]


@dataclass(frozen=True)
class Position:
    """Where a record sits: its topic and offset, its pool, and its event time."""

    pool: str
    topic: str
    offset: int
    ts: float

    def __str__(self) -> str:
        return f"pool {self.pool}, {self.topic} offset {self.offset} (ts {self.ts:.3f})"


@dataclass(frozen=True)
class Violation:
    """The first broken promise: which one, where, and the numbers."""

    kind: str
    position: Position | None
    message: str
    node: str | None = None
    pod: str | None = None
    resource: str | None = None
    used: int | None = None
    capacity: int | None = None

    def describe(self) -> str:
        where = str(self.position) if self.position is not None else "end of log"
        return f"{self.kind} at {where}: {self.message}"


@dataclass
class InvariantReport:
    """What a check saw: records per pool, the final state of every created pod, the first violation."""

    records: int = 0
    decisions: int = 0
    pools: dict[str, int] = field(default_factory=dict)
    pods: Counter[str] = field(default_factory=Counter)
    violation: Violation | None = None

    @property
    def ok(self) -> bool:
        return self.violation is None


def pool_records(log: PoolLog) -> Iterator[tuple[Position, AnyEvent]]:
    """A pool's events and decisions in log order: each decision right after the event at its ``input_offset``
    (decisions keep their topic order)."""
    events = list(zip(log.offsets, log.events, strict=True))
    i = 0
    for offset, decision in zip(log.decision_offsets, log.decisions, strict=True):
        while i < len(events) and events[i][0] <= decision.input_offset:
            at, event = events[i]
            yield Position(log.pool, EVENTS_TOPIC, at, event.ts), event
            i += 1
        yield Position(log.pool, DECISIONS_TOPIC, offset, decision.ts), decision
    for at, event in events[i:]:
        yield Position(log.pool, EVENTS_TOPIC, at, event.ts), event


@dataclass
class _Pod:
    spec: PodSpec
    observed: Placement | None = None
    promised: Placement | None = None
    pipelined: Placement | None = None
    terminating: bool = False
    evicting: bool = False
    eviction_decided: bool = False
    evicted: bool = False
    removed: bool = False
    succeeded: bool = False
    fresh_binds: int = 0
    word: str = ""
    owed_since: int | None = None

    @property
    def placed(self) -> Placement | None:
        """Where the pod sits as far as anyone promised: the cluster's word, else a decided bind."""
        return self.observed or self.promised

    @property
    def releasing(self) -> bool:
        return self.terminating or self.evicting or self.evicted


@dataclass
class _Usage:
    devices: Counter[int] = field(default_factory=Counter)
    loose_gpu: int = 0
    loose_share: int = 0
    cpu: int = 0
    memory: int = 0
    holders: dict[str, list[str]] = field(default_factory=dict)


def _gpu_share(spec: PodSpec, node: NodeSpec) -> int:
    """Milli-GPUs per device the pod takes (as the core converts a ``gpu-memory`` request)."""
    if spec.gpu_memory_mib:
        return -(-spec.gpu_memory_mib * UNIT // node.gpu_memory_mib) if node.gpu_memory_mib > 0 else 0
    if spec.gpu_fraction_milli is not None:
        return spec.gpu_fraction_milli
    return UNIT


def _add(usage: _Usage, spec: PodSpec, gpus: tuple[int, ...] | None, node: NodeSpec) -> None:
    key = spec.key
    usage.cpu += spec.requests.cpu_milli
    usage.memory += spec.requests.memory
    if spec.requests.cpu_milli:
        usage.holders.setdefault("cpu", []).append(key)
    if spec.requests.memory:
        usage.holders.setdefault("memory", []).append(key)
    wants_gpu = spec.requests.gpu_milli > 0 or bool(spec.gpu_memory_mib)
    if not wants_gpu:
        return
    if gpus:
        share = _gpu_share(spec, node)
        for index in gpus:
            usage.devices[index] += share
            usage.holders.setdefault(f"gpu[{index}]", []).append(key)
    elif spec.gpu_fraction_milli is not None or spec.gpu_memory_mib:
        usage.loose_share += spec.requests.gpu_milli
    else:
        usage.loose_gpu += spec.requests.gpu_milli
    usage.holders.setdefault("gpu", []).append(key)


def _over(usage: _Usage, node: NodeSpec) -> tuple[str, int, int] | None:
    """The first resource over capacity: (resource, used, capacity), GPU in milli-devices."""
    count = node.allocatable.gpu_milli // UNIT
    for index in sorted(usage.devices):
        if index >= count or index < 0:
            return f"gpu[{index}]", usage.devices[index], 0
        if usage.devices[index] > UNIT:
            return f"gpu[{index}]", usage.devices[index], UNIT
    whole = sum(1 for used in usage.devices.values() if used > 0) * UNIT + usage.loose_gpu
    if whole > node.allocatable.gpu_milli:
        return "gpu", whole, node.allocatable.gpu_milli
    total = sum(usage.devices.values()) + usage.loose_gpu + usage.loose_share
    if total > node.allocatable.gpu_milli:
        return "gpu", total, node.allocatable.gpu_milli
    if usage.cpu > node.allocatable.cpu_milli:
        return "cpu", usage.cpu, node.allocatable.cpu_milli
    if usage.memory > node.allocatable.memory:
        return "memory", usage.memory, node.allocatable.memory
    return None


_UNITS = {"cpu": "millicores", "memory": "bytes"}


_VIEWS: tuple[tuple[str, Callable[[_Pod], Placement | None]], ...] = (
    ("observed", lambda p: p.observed),
    ("decided", lambda p: p.placed),
    ("reserved", lambda p: p.pipelined or (None if p.releasing else p.placed)),
)


class _Checker:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeSpec] = {}
        self.pods: dict[str, _Pod] = {}
        self.on_node: dict[str, set[str]] = {}
        self.min_member: dict[str, int] = {}
        self.cycle: tuple[int, Position] | None = None
        self.cycle_jobs: set[str] = set()
        self.cycle_nodes: dict[str, Position] = {}
        self.last_cycle_input = -1
        self.violation: Violation | None = None
        self.seen = SeenIds()
        self.versions: dict[str, int] = {}

    # ------------------------------------------------------------------ folding

    def feed(self, position: Position, record: AnyEvent) -> Violation | None:
        if isinstance(record, BindRequested | EvictionRequested | PodPipelined | PodPending):
            if self.cycle is not None and self.cycle[0] != record.input_offset:
                found = self.close_cycle()
                if found is not None:
                    return found
            if self.cycle is None:
                self.cycle = (record.input_offset, position)
            self.last_cycle_input = max(self.last_cycle_input, record.input_offset)
            return self.decision(position, record)
        found = self.close_cycle()
        if found is not None:
            return found
        return self.event(position, record)

    def folded(self, event: AnyEvent) -> bool:
        """Whether the fold takes ``event`` in (``core/state.py`` rule 2): not a duplicate event id, not an
        observation of a pod or node at a resource version not above the one held (a replayed or stale copy)."""
        event_id: str | None = getattr(event, "event_id", None)
        if event_id is not None and not self.seen.add(event_id):
            return False
        match event:
            case PodObserved(pod=pod, resource_version=version) if version is not None:
                key = f"pod/{pod.uid}"
            case NodeObserved(node=node, resource_version=version) if version is not None:
                key = f"node/{node.name}/{node.uid}"
            case PodRemoved(uid=uid):
                self.versions.pop(f"pod/{uid}", None)
                return True
            case NodeRemoved(name=name):
                for held_key in [k for k in self.versions if k.startswith(f"node/{name}/")]:
                    del self.versions[held_key]
                return True
            case _:
                return True
        return newer_version(self.versions, key, version)

    def event(self, position: Position, event: AnyEvent) -> Violation | None:
        touched: set[str] = set()
        if not self.folded(event):
            return None
        match event:
            case NodeObserved(node=node):
                self.nodes[node.name] = node
                touched.add(node.name)
            case NodeRemoved(name=name):
                self.nodes.pop(name, None)
            case PodGroupObserved(pod_group=group):
                self.min_member[f"{group.namespace}/{group.name}"] = group.min_member
            case PodGroupRemoved(namespace=namespace, name=name):
                self.min_member.pop(f"{namespace}/{name}", None)
            case PodObserved(pod=spec):
                if not spec.managed and spec.node_name is None:
                    return None
                pod = self.pods.get(spec.uid)
                if pod is None:
                    pod = self.pods[spec.uid] = _Pod(spec)
                    if spec.node_name is None and spec.managed:
                        pod.owed_since = position.offset
                touched |= self._nodes_of(pod)
                pod.spec = spec
                pod.terminating = pod.terminating or spec.terminating
                if spec.phase in ("Succeeded", "Failed"):
                    pod.succeeded = spec.phase == "Succeeded"
                    pod.observed = pod.promised = pod.pipelined = None
                    pod.owed_since = None
                elif spec.node_name is None and pod.observed is not None:
                    pod.observed = None
                    pod.terminating = pod.evicting = pod.evicted = False
                    pod.fresh_binds = 0
                    pod.owed_since = position.offset
                    pod.word = "back to pending"
                elif spec.node_name is not None:
                    if pod.observed is not None and pod.observed[0] != spec.node_name:
                        return Violation(
                            "bound twice", position,
                            f"pod {spec.key} observed on node {spec.node_name} while bound to {pod.observed[0]}",
                            node=spec.node_name, pod=spec.key,
                        )
                    pod.observed = (spec.node_name, spec.gpu_indices or (pod.observed or (None, None))[1])
                    pod.promised = pod.pipelined = None
                    pod.owed_since = None
                touched |= self._nodes_of(pod)
                self._index(pod)
            case PodRemoved(uid=uid):
                pod = self.pods.get(uid)
                if pod is not None:
                    pod.removed = True
                    pod.observed = pod.promised = pod.pipelined = None
                    pod.fresh_binds = 0
                    pod.owed_since = None
            case PodBound(uid=uid, node=node, gpu_indices=gpus, already=already):
                pod = self.pods.get(uid)
                if pod is None or pod.removed:
                    return None
                where = pod.observed
                if where is not None and where[0] != node:
                    return Violation(
                        "bound twice", position,
                        f"pod {pod.spec.key} bound to node {node} while on node {where[0]}",
                        node=node, pod=pod.spec.key,
                    )
                if not already:
                    pod.fresh_binds += 1
                    if pod.fresh_binds > 1:
                        return Violation(
                            "bound twice", position,
                            f"pod {pod.spec.key} (uid {uid}) got a second successful binding (node {node}) "
                            "without a removal between",
                            node=node, pod=pod.spec.key,
                        )
                if where is None and not pod.succeeded:
                    pod.observed = (node, gpus or None)
                    pod.promised = pod.pipelined = None
                    pod.owed_since = None
                touched.add(node)
                self._index(pod)
            case BindFailed(uid=uid):
                pod = self.pods.get(uid)
                if pod is not None and pod.promised is not None:
                    touched |= self._nodes_of(pod)
                    pod.promised = None
                    if pod.observed is None and not pod.removed and not pod.succeeded:
                        pod.word = "bind failed"
                        pod.owed_since = position.offset
            case PodEvicted(uid=uid):
                pod = self.pods.get(uid)
                if pod is None:
                    return None
                if not pod.eviction_decided:
                    return Violation(
                        "unrecorded eviction", position,
                        f"pod {pod.spec.key} (uid {uid}) evicted, but no EvictionRequested decision names it",
                        pod=pod.spec.key,
                    )
                pod.evicted = True
                touched |= self._nodes_of(pod)
            case EvictionFailed(uid=uid):
                pod = self.pods.get(uid)
                if pod is not None:
                    pod.evicting = False
                    touched |= self._nodes_of(pod)
            case _:
                return None
        return self.check_nodes(position, touched)

    def decision(self, position: Position, decision: Decision) -> Violation | None:
        pod = self.pods.get(decision.uid)
        if pod is None:
            return None
        touched = self._nodes_of(pod)
        match decision:
            case BindRequested(node=node, gpu_indices=gpus):
                if pod.placed is not None and not pod.removed:
                    what = "bound to" if pod.observed is not None else "already promised"
                    return Violation(
                        "bound twice", position,
                        f"bind of {pod.spec.key} to node {node} decided while it is {what} node {pod.placed[0]}",
                        node=node, pod=pod.spec.key,
                    )
                pod.promised = (node, gpus or None)
                pod.pipelined = None
                pod.word = "bind"
                pod.owed_since = None
                self.cycle_jobs.add(decision.job)
                touched.add(node)
                self._index(pod)
            case PodPipelined(node=node, gpu_indices=gpus):
                pod.pipelined = (node, gpus or None)
                pod.word = "pipelined"
                pod.owed_since = None
                self.cycle_jobs.add(decision.job)
                touched.add(node)
                self._index(pod)
            case EvictionRequested():
                pod.evicting = pod.eviction_decided = True
                self.cycle_jobs.add(decision.job)
            case PodPending():
                pod.pipelined = None
                pod.word = "pending"
                pod.owed_since = None
        for name in touched:
            self.cycle_nodes[name] = position
        return None

    # ------------------------------------------------------------------ checks

    def _index(self, pod: _Pod) -> None:
        for name in self._nodes_of(pod):
            self.on_node.setdefault(name, set()).add(pod.spec.uid)

    @staticmethod
    def _nodes_of(pod: _Pod) -> set[str]:
        return {p[0] for p in (pod.observed, pod.promised, pod.pipelined) if p is not None}

    def check_nodes(self, position: Position, names: Iterable[str]) -> Violation | None:
        """Check the nodes a record touched (the nodes its pod was or now is on) in every view."""
        for name in sorted(names):
            node = self.nodes.get(name)
            if node is None:
                continue
            listed = self.on_node.get(name, set())
            here = [self.pods[uid] for uid in sorted(listed)]
            gone = {pod.spec.uid for pod in here if name not in self._nodes_of(pod)}
            if gone:
                listed -= gone
                here = [pod for pod in here if pod.spec.uid not in gone]
            for view, where in _VIEWS:
                usage = _Usage()
                for pod in here:
                    placement = where(pod)
                    if placement is not None and placement[0] == name:
                        _add(usage, pod.spec, placement[1], node)
                over = _over(usage, node)
                if over is not None:
                    return self._capacity(position, view, name, over, usage)
        return None

    @staticmethod
    def _capacity(position: Position, view: str, node: str, over: tuple[str, int, int], usage: _Usage) -> Violation:
        resource, used, capacity = over
        holders = usage.holders.get(resource, [])
        if resource.startswith("gpu"):
            numbers = f"{used / UNIT:g} GPU on a capacity of {capacity / UNIT:g}"
            if resource != "gpu" and capacity == 0:
                numbers = f"device index {resource[4:-1]} does not exist"
        else:
            numbers = f"{used} of {capacity} {_UNITS[resource]}"
        explain = {
            "observed": "as the cluster reports it",
            "decided": "counting binds decided and not yet confirmed, and pods still terminating",
            "reserved": "counting binds and pipelined reservations next to pods not releasing",
        }[view]
        return Violation(
            f"over capacity ({view})", position,
            f"node {node} {resource}: {numbers} ({explain}); held by {', '.join(holders)}",
            node=node, pod=holders[-1] if holders else None, resource=resource, used=used, capacity=capacity,
        )

    def close_cycle(self) -> Violation | None:
        if self.cycle is None:
            return None
        input_offset, position = self.cycle
        jobs, self.cycle, self.cycle_jobs = self.cycle_jobs, None, set()
        nodes, self.cycle_nodes = self.cycle_nodes, {}
        for name in sorted(nodes):
            found = self.check_nodes(nodes[name], [name])
            if found is not None:
                return found
        for job in sorted(jobs):
            need = self.min_member.get(job)
            if need is None or need <= 1:
                continue
            members = 0
            for pod in self.pods.values():
                spec = pod.spec
                if pod.removed or not spec.pod_group or f"{spec.namespace}/{spec.pod_group}" != job:
                    continue
                if pod.succeeded or pod.pipelined is not None or (pod.placed is not None and not pod.releasing):
                    members += 1
            if 0 < members < need:
                return Violation(
                    "partial gang", position,
                    f"job {job} has {members} members bound or pipelined after the cycle at input offset "
                    f"{input_offset}, below its minMember {need}",
                    pod=job, used=members, capacity=need,
                )
        return None

    def finish(self, report: InvariantReport) -> Violation | None:
        found = self.close_cycle()
        if found is not None:
            return found
        for uid in sorted(self.pods, key=lambda u: (self.pods[u].spec.created, u)):
            pod = self.pods[uid]
            if not pod.spec.managed:
                continue
            state = self._final(pod)
            report.pods[state] += 1
            if state == "unaccounted":
                return Violation(
                    "unaccounted pod", None,
                    f"pod {pod.spec.key} (uid {uid}) needed a decision from cluster-events offset {pod.owed_since} "
                    f"({pod.word or 'created'}), and cycles ran up to input offset {self.last_cycle_input}, "
                    "but none bound, pipelined, left it pending with a reason, or evicted it",
                    pod=pod.spec.key,
                )
        return None

    def _final(self, pod: _Pod) -> str:
        if pod.removed:
            return "evicted" if pod.eviction_decided else "deleted"
        if pod.evicted:
            return "evicted"
        if pod.succeeded or pod.spec.phase == "Failed" or pod.observed is not None:
            return "bound"
        if pod.promised is not None:
            return "bind decided"
        if pod.pipelined is not None:
            return "pipelined"
        if pod.word == "pending":
            return "pending"
        if pod.owed_since is not None and self.last_cycle_input >= pod.owed_since:
            return "unaccounted"
        return "undecided"


def check_records(
    records: Iterable[tuple[Position, AnyEvent]], report: InvariantReport | None = None
) -> InvariantReport:
    """Check one pool's records (in log order, see ``pool_records``); stop at the first violation."""
    report = report if report is not None else InvariantReport()
    checker = _Checker()
    for position, record in records:
        report.records += 1
        report.pools[position.pool] = report.pools.get(position.pool, 0) + 1
        if position.topic == DECISIONS_TOPIC:
            report.decisions += 1
        found = checker.feed(position, record)
        if found is not None:
            report.violation = found
            return report
    report.violation = checker.finish(report)
    return report


def check_history(history: History) -> InvariantReport:
    """Every invariant over a whole history: each pool's hash chain, then each pool's records in log order."""
    report = InvariantReport()
    for name, log in history.pools.items():
        chain = verify_chain(log.decisions, offsets=log.decision_offsets)
        if chain.broken is not None:
            broken = chain.broken
            at = None
            if broken.offset is not None:
                at = Position(name, DECISIONS_TOPIC, broken.offset, broken.decision.ts)
            report.violation = Violation("broken chain", at, broken.describe(), pod=broken.decision.name)
            return report
    for log in history.pools.values():
        check_records(pool_records(log), report)
        if report.violation is not None:
            return report
    return report
