"""The one schema: every event and decision that crosses a topic, as frozen pydantic models.

Three families, named as past-tense facts:

* observed  — what the connectors saw (``NodeObserved``, ``PodObserved``, ``QueueObserved`` …, ``Tick``);
* decided   — what the scheduler decided (``BindRequested``, ``EvictionRequested``, ``PodPipelined``,
  ``PodPending``);
* outcome   — what the binder achieved (``PodBound``, ``BindFailed``, ``PodEvicted``, ``EvictionFailed``).

Plus ``DeadLetter``: a record some consumer could not use, with the reason.

Units everywhere: GPU in milli-devices (``gpu_milli``: 1000 = one whole GPU), CPU in millicores,
memory in bytes. Time is event time in seconds (``ts``), never the wall clock of the reader.

Every model carries ``type`` (the discriminator) and ``v`` (schema version). Nobody re-declares these
fields elsewhere: topics/ holds JSON Schemas generated from this module.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from typing import Annotated, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 1
ID_NAMESPACE = uuid.UUID("6f1c1e0e-4b7a-5b5e-9a51-6b61692d7374")
DEFAULT_POOL = "default"
ALL_POOLS = "*"


class Model(BaseModel):
    """Base of every schema type: immutable, strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


_ID_PREFIX = ID_NAMESPACE.bytes


def stable_id(*parts: str) -> str:
    """A deterministic id (uuid5) from its parts; the same inputs always give the same id. Computed as RFC 4122
    section 4.3 does (SHA-1 of namespace and name, version 5, variant 10) straight from the digest, which is
    what ``str(uuid.uuid5(ID_NAMESPACE, name))`` returns without building the ``UUID`` object."""
    digest = bytearray(hashlib.sha1(_ID_PREFIX + "\x1f".join(parts).encode(), usedforsecurity=False).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# --------------------------------------------------------------------------- value objects


class Resources(Model):
    """A resource vector. GPU in milli-devices, CPU in millicores, memory in bytes."""

    gpu_milli: int = 0
    cpu_milli: int = 0
    memory: int = 0


class QueueResource(Model):
    """One resource of a queue: quota (-1 = unlimited), over-quota weight, limit (-1 = none).

    Units as in ``Resources`` (GPU milli-devices, CPU millicores, memory bytes).
    """

    quota: int = 0
    over_quota_weight: int = 1
    limit: int = -1


class QueueResources(Model):
    gpu: QueueResource = QueueResource()
    cpu: QueueResource = QueueResource()
    memory: QueueResource = QueueResource()


class Toleration(Model):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""


class Taint(Model):
    key: str
    value: str = ""
    effect: str = "NoSchedule"


class NodeSelectorRequirement(Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[str, ...] = ()


class NodeAffinityTerm(Model):
    """One required node-affinity term: all requirements must hold (terms are OR-ed)."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()


class GpuDevice(Model):
    """One physical GPU on a node, as last reported by the NVML agent.

    ``healthy`` is False after a fatal XID or an uncorrectable ECC error (``reason`` says which); the readings
    that a GPU does not support stay at their defaults (``None`` / 0).
    """

    index: int
    uuid: str = ""
    memory_mib: int = 0
    healthy: bool = True
    reason: str = ""
    memory_used_mib: int = 0
    utilization_pct: float | None = None
    temperature_c: int | None = None
    ecc_uncorrectable: int | None = None
    xids: tuple[int, ...] = ()


# --------------------------------------------------------------------------- object specs


class NodeSpec(Model):
    name: str
    uid: str = ""
    pool: str = DEFAULT_POOL
    labels: dict[str, str] = {}
    allocatable: Resources = Resources()
    gpu_memory_mib: int = 0
    ready: bool = True
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    created: float = 0.0


class QueueSpec(Model):
    """A Queue. Min-runtimes are seconds (-1: never evicted by that action, 0: no protection, None: unset).

    ``preempt_min_runtime_s`` / ``reclaim_min_runtime_s`` are KAI's ``spec.preemptMinRuntime`` /
    ``spec.reclaimMinRuntime``; ``min_runtime_s`` is our ``spec.minRuntime`` shorthand, which stands for either
    of them where that one is unset (histories written before the split carry only it).
    """

    name: str
    uid: str = ""
    parent: str | None = None
    priority: int = 100
    resources: QueueResources = QueueResources()
    min_runtime_s: float | None = None
    preempt_min_runtime_s: float | None = None
    reclaim_min_runtime_s: float | None = None
    created: float = 0.0


class TopologyConstraint(Model):
    required_level: str | None = None
    preferred_level: str | None = None
    topology: str | None = None


class SubGroupSpec(Model):
    """One entry of a PodGroup's ``spec.subGroups``: its pods carry label ``kai.scheduler/subgroup-name``; at least
    ``min_member`` of them run, or none (a subgroup with child subgroups only groups them)."""

    name: str
    min_member: int = 1
    parent: str | None = None


class PodGroupSpec(Model):
    namespace: str
    name: str
    uid: str = ""
    queue: str
    min_member: int = 1
    priority_class: str | None = None
    priority: int | None = None
    preemptible: bool | None = None
    topology_constraint: TopologyConstraint | None = None
    sub_groups: tuple[SubGroupSpec, ...] = ()
    pool: str = DEFAULT_POOL
    created: float = 0.0


PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]


class PodSpec(Model):
    """A pod as the scheduler sees it.

    * ``managed`` is False for a pod of another scheduler: it is recorded only when bound to a node, because
      it still consumes that node's resources (its ``queue`` is then ""). Unbound foreign pods are not events.
    * ``queue`` is the ``kai.scheduler/queue`` label; "" means "take it from the pod group".
    * ``requests.gpu_milli`` is the whole GPU request (``nvidia.com/gpu`` × 1000) or, for a fraction,
      ``gpu_fraction_milli``, on each of ``gpu_fraction_devices`` GPUs (annotation ``gpu-fraction-num-devices``;
      the pod is charged the fraction times the devices). A ``gpu-memory`` pod has ``gpu_memory_mib`` set and
      ``requests.gpu_milli`` 0: its fraction depends on the node (memory per GPU).
    * ``duration_s`` (annotation ``kai.scheduler/duration-seconds``): how long it runs once bound (simulated
      kubelet and trace simulation only).
    """

    namespace: str
    name: str
    uid: str
    queue: str
    pod_group: str | None = None
    sub_group: str | None = None
    pool: str = DEFAULT_POOL
    requests: Resources = Resources()
    gpu_fraction_milli: int | None = None
    gpu_fraction_devices: int = 1
    gpu_memory_mib: int | None = None
    priority_class: str | None = None
    priority: int | None = None
    preemptible: bool | None = None
    node_name: str | None = None
    gpu_indices: tuple[int, ...] | None = None
    phase: PodPhase = "Pending"
    terminating: bool = False
    node_selector: dict[str, str] = {}
    affinity: tuple[NodeAffinityTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    labels: dict[str, str] = {}
    duration_s: float | None = None
    created: float = 0.0
    started: float | None = None
    managed: bool = True

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class PriorityClassSpec(Model):
    name: str
    value: int
    preemptible: bool | None = None


class TopologySpec(Model):
    name: str
    levels: tuple[str, ...]


# --------------------------------------------------------------------------- observed events


class ObservedBase(Model):
    v: int = SCHEMA_VERSION
    event_id: str
    ts: float
    pool: str = DEFAULT_POOL


class NodeObserved(ObservedBase):
    type: Literal["NodeObserved"] = "NodeObserved"
    node: NodeSpec


class NodeRemoved(ObservedBase):
    type: Literal["NodeRemoved"] = "NodeRemoved"
    name: str


class PodObserved(ObservedBase):
    type: Literal["PodObserved"] = "PodObserved"
    pod: PodSpec


class PodRemoved(ObservedBase):
    type: Literal["PodRemoved"] = "PodRemoved"
    namespace: str
    name: str
    uid: str


class QueueObserved(ObservedBase):
    type: Literal["QueueObserved"] = "QueueObserved"
    queue: QueueSpec


class QueueRemoved(ObservedBase):
    type: Literal["QueueRemoved"] = "QueueRemoved"
    name: str


class PodGroupObserved(ObservedBase):
    type: Literal["PodGroupObserved"] = "PodGroupObserved"
    pod_group: PodGroupSpec


class PodGroupRemoved(ObservedBase):
    type: Literal["PodGroupRemoved"] = "PodGroupRemoved"
    namespace: str
    name: str


class PriorityClassObserved(ObservedBase):
    type: Literal["PriorityClassObserved"] = "PriorityClassObserved"
    priority_class: PriorityClassSpec


class TopologyObserved(ObservedBase):
    type: Literal["TopologyObserved"] = "TopologyObserved"
    topology: TopologySpec


class GpuHealthObserved(ObservedBase):
    """An NVML reading of one node's GPUs (replaces what was known of that node's devices)."""

    type: Literal["GpuHealthObserved"] = "GpuHealthObserved"
    node: str
    gpus: tuple[GpuDevice, ...]
    utilization_pct: tuple[float, ...] = ()


class Tick(ObservedBase):
    """A timer event: advances event time and triggers a scheduling cycle."""

    type: Literal["Tick"] = "Tick"


# --------------------------------------------------------------------------- decisions

ActionName = Literal["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"]


class DecisionBase(Model):
    """Common to every decision: where it came from and its place in the audit hash chain.

    ``input_offset`` is the offset (in its pool's partition of cluster-events) of the last event folded
    before the cycle that made it; ``decision_id`` is ``stable_id(pool, str(input_offset), uid, type)``,
    so the same log prefix always yields the same ids.
    """

    v: int = SCHEMA_VERSION
    decision_id: str
    ts: float
    pool: str = DEFAULT_POOL
    input_offset: int
    config_hash: str
    code_version: str
    action: ActionName
    namespace: str
    name: str
    uid: str
    job: str
    queue: str
    reason: str = ""
    prev_hash: str = ""


class BindRequested(DecisionBase):
    type: Literal["BindRequested"] = "BindRequested"
    node: str
    gpu_indices: tuple[int, ...] = ()
    gpu_fraction_milli: int | None = None


class EvictionRequested(DecisionBase):
    type: Literal["EvictionRequested"] = "EvictionRequested"
    node: str | None = None
    preemptor: str | None = None
    details: dict[str, str] = {}


class PodPipelined(DecisionBase):
    type: Literal["PodPipelined"] = "PodPipelined"
    node: str
    gpu_indices: tuple[int, ...] = ()
    waiting_for: tuple[str, ...] = ()


PendingCode = Literal[
    "NoNodeFits",
    "QueueOverLimit",
    "OverDeservedNonPreemptible",
    "NotEnoughOverQuotaShare",
    "InsufficientCapacity",
    "MinRuntimeProtected",
    "GangIncomplete",
    "WaitingForReclaim",
    "UnknownQueue",
    "Unhealthy",
]


class PodPending(DecisionBase):
    """A pod left pending this cycle, with a machine-readable reason.

    ``predicates`` counts nodes per failed predicate (e.g. {"InsufficientGPU": 12}).
    """

    type: Literal["PodPending"] = "PodPending"
    code: PendingCode
    predicates: dict[str, int] = {}
    details: dict[str, str] = {}


# --------------------------------------------------------------------------- outcomes


class OutcomeBase(Model):
    v: int = SCHEMA_VERSION
    event_id: str
    ts: float
    pool: str = DEFAULT_POOL
    decision_id: str
    namespace: str
    name: str
    uid: str


class PodBound(OutcomeBase):
    type: Literal["PodBound"] = "PodBound"
    node: str
    gpu_indices: tuple[int, ...] = ()
    already: bool = False


class BindFailed(OutcomeBase):
    type: Literal["BindFailed"] = "BindFailed"
    node: str
    error: str


class PodEvicted(OutcomeBase):
    type: Literal["PodEvicted"] = "PodEvicted"
    already: bool = False


class EvictionFailed(OutcomeBase):
    type: Literal["EvictionFailed"] = "EvictionFailed"
    error: str


# --------------------------------------------------------------------------- recorded configuration


class ConfigRecorded(Model):
    """The scheduler config a processor decides with, published to the decisions topic (keyed by pool)
    before that pool's first decision under it, so replay can rebuild decisions with the recorded config.

    ``config`` is the canonical JSON of ``SchedulerConfig``; ``config_hash`` is what decisions carry.
    Not a decision: it is not part of the hash chain and ``loads_decision`` rejects it; read the decisions
    topic with ``loads_decisions_record``.
    """

    type: Literal["ConfigRecorded"] = "ConfigRecorded"
    v: int = SCHEMA_VERSION
    ts: float
    pool: str = DEFAULT_POOL
    config_hash: str
    code_version: str
    config: str


class QueueShare(Model):
    """One queue's standing at a moment: fair share, deserved (quota) and allocated, per resource.

    Units as in ``Resources``; a deserved of -1 in a field means unlimited quota.
    """

    queue: str
    fair_share: Resources
    deserved: Resources
    allocated: Resources


class FairShareRecorded(Model):
    """Every queue's fair share after a cycle, published to the decisions topic whenever it changed.

    Emitted by the trace simulator (and processors that choose to) so analytics can plot allocation against
    fair share over time. Not a decision: not in the hash chain; ``loads_decisions_record`` accepts it.
    """

    type: Literal["FairShareRecorded"] = "FairShareRecorded"
    v: int = SCHEMA_VERSION
    ts: float
    pool: str = DEFAULT_POOL
    input_offset: int
    config_hash: str
    queues: tuple[QueueShare, ...]


# --------------------------------------------------------------------------- dead letters


class DeadLetter(Model):
    """A record a consumer could not use, parked on the dead-letter topic with the reason.

    ``value_b64`` always holds the exact bytes; ``value_text`` holds them as text when they are UTF-8.
    ``ts`` is the original record's timestamp (seconds); ``event_id`` is stable for (topic, partition, offset).
    """

    v: int = SCHEMA_VERSION
    type: Literal["DeadLetter"] = "DeadLetter"
    event_id: str
    ts: float
    topic: str
    partition: int
    offset: int
    key: str | None = None
    value_text: str | None = None
    value_b64: str
    reason: str

    @classmethod
    def from_raw(
        cls, *, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, reason: str, ts: float
    ) -> DeadLetter:
        raw = value or b""
        try:
            text: str | None = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        return cls(
            event_id=stable_id("dead-letter", topic, str(partition), str(offset)),
            ts=ts,
            topic=topic,
            partition=partition,
            offset=offset,
            key=key.decode("utf-8", "replace") if key is not None else None,
            value_text=text,
            value_b64=base64.b64encode(raw).decode("ascii"),
            reason=reason,
        )

    def raw_value(self) -> bytes:
        return base64.b64decode(self.value_b64)


# --------------------------------------------------------------------------- unions and codecs

ObservedEvent = Annotated[
    NodeObserved
    | NodeRemoved
    | PodObserved
    | PodRemoved
    | QueueObserved
    | QueueRemoved
    | PodGroupObserved
    | PodGroupRemoved
    | PriorityClassObserved
    | TopologyObserved
    | GpuHealthObserved
    | Tick,
    Field(discriminator="type"),
]
Decision = Annotated[
    BindRequested | EvictionRequested | PodPipelined | PodPending, Field(discriminator="type")
]
Outcome = Annotated[PodBound | BindFailed | PodEvicted | EvictionFailed, Field(discriminator="type")]
ClusterEvent = Annotated[
    NodeObserved
    | NodeRemoved
    | PodObserved
    | PodRemoved
    | QueueObserved
    | QueueRemoved
    | PodGroupObserved
    | PodGroupRemoved
    | PriorityClassObserved
    | TopologyObserved
    | GpuHealthObserved
    | Tick
    | PodBound
    | BindFailed
    | PodEvicted
    | EvictionFailed,
    Field(discriminator="type"),
]
AnyEvent = Annotated[
    NodeObserved
    | NodeRemoved
    | PodObserved
    | PodRemoved
    | QueueObserved
    | QueueRemoved
    | PodGroupObserved
    | PodGroupRemoved
    | PriorityClassObserved
    | TopologyObserved
    | GpuHealthObserved
    | Tick
    | PodBound
    | BindFailed
    | PodEvicted
    | EvictionFailed
    | BindRequested
    | EvictionRequested
    | PodPipelined
    | PodPending,
    Field(discriminator="type"),
]

DecisionsRecord = Annotated[
    BindRequested | EvictionRequested | PodPipelined | PodPending | ConfigRecorded | FairShareRecorded,
    Field(discriminator="type"),
]

CLUSTER_EVENT: TypeAdapter[ClusterEvent] = TypeAdapter(ClusterEvent)
DECISION: TypeAdapter[Decision] = TypeAdapter(Decision)
OUTCOME: TypeAdapter[Outcome] = TypeAdapter(Outcome)
ANY_EVENT: TypeAdapter[AnyEvent] = TypeAdapter(AnyEvent)
DECISIONS_RECORD: TypeAdapter[DecisionsRecord] = TypeAdapter(DecisionsRecord)


class MalformedEvent(ValueError):
    """Raised when bytes do not decode to a known event; the message says why (for the dead letter)."""


def dumps(model: Model) -> bytes:
    """Canonical bytes of an event or decision: orjson of the JSON-mode dump, keys sorted."""
    return orjson.dumps(model.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)


def loads_cluster_event(raw: bytes) -> ClusterEvent:
    try:
        return CLUSTER_EVENT.validate_json(raw)
    except ValueError as exc:
        raise MalformedEvent(str(exc)) from exc


def loads_decision(raw: bytes) -> Decision:
    try:
        return DECISION.validate_json(raw)
    except ValueError as exc:
        raise MalformedEvent(str(exc)) from exc


def loads_decisions_record(raw: bytes) -> DecisionsRecord:
    """Decode one record of the decisions topic: a decision, a ``ConfigRecorded`` or a ``FairShareRecorded``."""
    try:
        return DECISIONS_RECORD.validate_json(raw)
    except ValueError as exc:
        raise MalformedEvent(str(exc)) from exc


def loads_any(raw: bytes) -> AnyEvent:
    try:
        return ANY_EVENT.validate_json(raw)
    except ValueError as exc:
        raise MalformedEvent(str(exc)) from exc


def decision_hash(decision: Decision) -> str:
    """SHA-256 of the decision's canonical bytes (``prev_hash`` included, so hashes form a chain)."""
    return hashlib.sha256(dumps(decision)).hexdigest()


def chain_encoded(decisions: list[Decision], prev_hash: str) -> tuple[list[tuple[Decision, bytes]], str]:
    """``chain``, each linked decision with its canonical bytes (``dumps``, what its hash is taken of)."""
    linked: list[tuple[Decision, bytes]] = []
    head = prev_hash
    for decision in decisions:
        stamped = decision.model_copy(update={"prev_hash": head})
        raw = dumps(stamped)
        linked.append((stamped, raw))
        head = hashlib.sha256(raw).hexdigest()
    return linked, head


def chain(decisions: list[Decision], prev_hash: str) -> tuple[list[Decision], str]:
    """Link decisions into the hash chain after ``prev_hash``; return them and the new head hash."""
    linked, head = chain_encoded(decisions, prev_hash)
    return [decision for decision, _ in linked], head
