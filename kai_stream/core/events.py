"""The one schema: every event and decision that crosses a topic, as frozen pydantic models.

Three families, named as past-tense facts:

* observed  — what the connectors saw (``NodeObserved``, ``PodObserved``, ``QueueObserved`` …, ``Tick``);
* decided   — what the scheduler decided (``BindRequested``, ``EvictionRequested``, ``PodPipelined``,
  ``PodPending``);
* outcome   — what the binder achieved (``PodBound``, ``BindFailed``, ``PodEvicted``, ``EvictionFailed``).

Plus ``DeadLetter``: a record some consumer could not use, with the reason.

Units everywhere: GPU in milli-devices (``gpu_milli``: 1000 = one whole GPU), CPU in millicores,
memory in bytes. Time is event time in seconds (``ts``), never the wall clock of the reader.

Values are bounded at the schema, so a record that decodes is one the scheduler can fold: integers fit int64,
resources and counts are non-negative, times are finite and plausible (``0 <= ts <= MAX_TS``), names and
texts have Kubernetes-like lengths, lists and maps are bounded. A record outside the bounds fails to decode
(``MalformedEvent``) and is dead-lettered with the reason.

Every model carries ``type`` (the discriminator) and ``v`` (schema version). Nobody re-declares these
fields elsewhere: topics/ holds JSON Schemas generated from this module.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from typing import Annotated, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

SCHEMA_VERSION = 1
ID_NAMESPACE = uuid.UUID("6f1c1e0e-4b7a-5b5e-9a51-6b61692d7374")
DEFAULT_POOL = "default"
ALL_POOLS = "*"

INT64_MAX = 2**63 - 1
MAX_TS = 1e11
"""Latest plausible event time (seconds since the epoch, year 5138); anything above is a poison value."""
MAX_NAME = 253
"""A Kubernetes object name (DNS-1123 subdomain) at most; also pools, queues, uids, ids."""
MAX_TEXT = 8192
MAX_ITEMS = 1024
DEAD_LETTER_KEEP = 64 * 1024
"""Bytes of a dead-lettered record kept: with its text (JSON-escaped, at most 6 bytes a byte) and base64 copies,
a dead letter stays well under a producer's 1 MiB request limit."""

Int64 = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
"""A non-negative amount (resources, offsets, sizes)."""
Limit = Annotated[int, Field(ge=-1, le=INT64_MAX)]
"""A non-negative amount, or -1 for "unlimited" / "none"."""
GpuIndex = Annotated[int, Field(ge=0, le=MAX_ITEMS)]
Ts = Annotated[float, Field(ge=0.0, le=MAX_TS, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=-1.0, le=MAX_TS, allow_inf_nan=False)]
Percent = Annotated[float, Field(ge=0.0, le=100.0, allow_inf_nan=False)]
Name = Annotated[str, Field(max_length=MAX_NAME)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Labels = Annotated[dict[Text, Text], Field(max_length=MAX_ITEMS)]
GpuIndices = Annotated[tuple[GpuIndex, ...], Field(max_length=MAX_ITEMS)]


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


class ResourceAmounts(Model):
    """A resource vector whose fields may be -1 (unlimited), as a queue's deserved share. Units as in
    ``Resources``."""

    gpu_milli: Limit = 0
    cpu_milli: Limit = 0
    memory: Limit = 0


class Resources(ResourceAmounts):
    """A resource vector. GPU in milli-devices, CPU in millicores, memory in bytes; never negative."""

    gpu_milli: Count = 0
    cpu_milli: Count = 0
    memory: Count = 0


class QueueResource(Model):
    """One resource of a queue: quota (-1 = unlimited), over-quota weight, limit (-1 = none).

    Units as in ``Resources`` (GPU milli-devices, CPU millicores, memory bytes).
    """

    quota: Limit = 0
    over_quota_weight: Count = 1
    limit: Limit = -1


class QueueResources(Model):
    gpu: QueueResource = QueueResource()
    cpu: QueueResource = QueueResource()
    memory: QueueResource = QueueResource()


class Toleration(Model):
    key: Text = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: Text = ""
    effect: Text = ""


class Taint(Model):
    key: Text
    value: Text = ""
    effect: Text = "NoSchedule"


class NodeSelectorRequirement(Model):
    key: Text
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: Annotated[tuple[Text, ...], Field(max_length=MAX_ITEMS)] = ()


class NodeAffinityTerm(Model):
    """One required node-affinity term: all requirements must hold (terms are OR-ed)."""

    match_expressions: Annotated[tuple[NodeSelectorRequirement, ...], Field(max_length=MAX_ITEMS)] = ()


class GpuDevice(Model):
    """One physical GPU on a node, as last reported by the NVML agent.

    ``healthy`` is False after a fatal XID or an uncorrectable ECC error (``reason`` says which); the readings
    that a GPU does not support stay at their defaults (``None`` / 0).
    """

    index: GpuIndex
    uuid: Name = ""
    memory_mib: Count = 0
    healthy: bool = True
    reason: Text = ""
    memory_used_mib: Count = 0
    utilization_pct: Percent | None = None
    temperature_c: Int64 | None = None
    ecc_uncorrectable: Count | None = None
    xids: Annotated[tuple[Int64, ...], Field(max_length=MAX_ITEMS)] = ()


class DraDevice(Model):
    """One GPU device a node's ``resource.k8s.io`` ResourceSlices publish, named as a claim allocation names it."""

    driver: Name
    pool: Name
    device: Name


class DraRequest(Model):
    """``count`` devices for request ``request`` of the pod's claim reference ``claim``
    (``spec.resourceClaims[].name``): of ResourceClaim ``resource_claim``, or, when None, of the claim made from a
    template (named in the pod's ``status.resourceClaimStatuses``)."""

    claim: Name
    resource_claim: Name | None = None
    request: Name
    count: Annotated[int, Field(ge=1, le=MAX_ITEMS)]


class DraAllocation(Model):
    """One device the scheduler allocates to one request of a pod's claim (a ``status.allocation.devices.results``
    entry of the ResourceClaim)."""

    claim: Name
    resource_claim: Name | None = None
    request: Name
    driver: Name
    pool: Name
    device: Name


# --------------------------------------------------------------------------- object specs


class NodeSpec(Model):
    """A node. ``dra_devices``: the GPU devices its ResourceSlices publish, in the order of its GPU indices (they are
    its first GPUs, device-plugin GPUs follow them)."""

    name: Name
    uid: Name = ""
    pool: Name = DEFAULT_POOL
    labels: Labels = {}
    allocatable: Resources = Resources()
    gpu_memory_mib: Count = 0
    ready: bool = True
    unschedulable: bool = False
    taints: Annotated[tuple[Taint, ...], Field(max_length=MAX_ITEMS)] = ()
    created: Ts = 0.0
    dra_devices: Annotated[tuple[DraDevice, ...], Field(max_length=MAX_ITEMS)] = ()

    @field_validator("allocatable")
    @classmethod
    def _plausible_gpus(cls, allocatable: Resources) -> Resources:
        """A node has at most ``MAX_ITEMS`` GPUs (the scheduler keeps one entry per device)."""
        if allocatable.gpu_milli > MAX_ITEMS * 1000:
            raise ValueError(f"allocatable gpu_milli {allocatable.gpu_milli} is over {MAX_ITEMS} GPUs")
        return allocatable


class QueueSpec(Model):
    """A Queue. Min-runtimes are seconds (-1: never evicted by that action, 0: no protection, None: unset).

    ``preempt_min_runtime_s`` / ``reclaim_min_runtime_s`` are KAI's ``spec.preemptMinRuntime`` /
    ``spec.reclaimMinRuntime``; ``min_runtime_s`` is our ``spec.minRuntime`` shorthand, which stands for either
    of them where that one is unset (histories written before the split carry only it).
    """

    name: Name
    uid: Name = ""
    parent: Name | None = None
    priority: Int64 = 100
    resources: QueueResources = QueueResources()
    min_runtime_s: Seconds | None = None
    preempt_min_runtime_s: Seconds | None = None
    reclaim_min_runtime_s: Seconds | None = None
    created: Ts = 0.0


class TopologyConstraint(Model):
    required_level: Text | None = None
    preferred_level: Text | None = None
    topology: Name | None = None


class SubGroupSpec(Model):
    """One entry of a PodGroup's ``spec.subGroups``: its pods carry label ``kai.scheduler/subgroup-name``; at least
    ``min_member`` of them run, or none (a subgroup with child subgroups only groups them). ``topology_constraint``
    keeps the pods of the subgroup (its descendants' pods for a parent) inside one domain, within the domain of
    its parent and of the pod group."""

    name: Name
    min_member: Count = 1
    parent: Name | None = None
    topology_constraint: TopologyConstraint | None = None


class PodGroupSpec(Model):
    namespace: Name
    name: Name
    uid: Name = ""
    queue: Name
    min_member: Count = 1
    priority_class: Name | None = None
    priority: Int64 | None = None
    preemptible: bool | None = None
    topology_constraint: TopologyConstraint | None = None
    sub_groups: Annotated[tuple[SubGroupSpec, ...], Field(max_length=MAX_ITEMS)] = ()
    pool: Name = DEFAULT_POOL
    created: Ts = 0.0


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
    * GPUs from DRA ResourceClaims (``kai_stream.core.dra``) are in ``requests.gpu_milli`` with a required node
      affinity on nodes that publish GPU devices, and ``dra_requests`` says which claim requests they serve (the
      core allocates a node's devices to them, ``BindRequested.dra_devices``); ``refused`` says why its claims
      cannot be served (the pod then stays pending with code ``ResourceClaimUnusable``).
    """

    namespace: Name
    name: Name
    uid: Name
    queue: Name
    pod_group: Name | None = None
    sub_group: Name | None = None
    pool: Name = DEFAULT_POOL
    requests: Resources = Resources()
    gpu_fraction_milli: Annotated[int, Field(ge=0, le=1000)] | None = None
    gpu_fraction_devices: Annotated[int, Field(ge=1, le=MAX_ITEMS)] = 1
    gpu_memory_mib: Count | None = None
    priority_class: Name | None = None
    priority: Int64 | None = None
    preemptible: bool | None = None
    node_name: Name | None = None
    gpu_indices: GpuIndices | None = None
    phase: PodPhase = "Pending"
    terminating: bool = False
    node_selector: Labels = {}
    affinity: Annotated[tuple[NodeAffinityTerm, ...], Field(max_length=MAX_ITEMS)] = ()
    tolerations: Annotated[tuple[Toleration, ...], Field(max_length=MAX_ITEMS)] = ()
    labels: Labels = {}
    duration_s: Annotated[float, Field(ge=0.0, le=MAX_TS, allow_inf_nan=False)] | None = None
    created: Ts = 0.0
    started: Ts | None = None
    managed: bool = True
    refused: Text | None = None
    dra_requests: Annotated[tuple[DraRequest, ...], Field(max_length=MAX_ITEMS)] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class PriorityClassSpec(Model):
    name: Name
    value: Int64
    preemptible: bool | None = None


class TopologySpec(Model):
    name: Name
    levels: Annotated[tuple[Text, ...], Field(max_length=MAX_ITEMS)]


# --------------------------------------------------------------------------- observed events


class ObservedBase(Model):
    v: Int64 = SCHEMA_VERSION
    event_id: Name
    ts: Ts
    pool: Name = DEFAULT_POOL


class NodeObserved(ObservedBase):
    """A node as observed; ``resource_version`` is its Kubernetes ``metadata.resourceVersion`` when the source
    has one (None for scenarios and traces): the fold ignores an observation not newer than the one it holds."""

    type: Literal["NodeObserved"] = "NodeObserved"
    node: NodeSpec
    resource_version: Count | None = None


class NodeRemoved(ObservedBase):
    type: Literal["NodeRemoved"] = "NodeRemoved"
    name: Name


class PodObserved(ObservedBase):
    """A pod as observed; ``resource_version`` as in ``NodeObserved`` (a re-list's stale copy never undoes a
    newer observation or a bind)."""

    type: Literal["PodObserved"] = "PodObserved"
    pod: PodSpec
    resource_version: Count | None = None


class PodRemoved(ObservedBase):
    type: Literal["PodRemoved"] = "PodRemoved"
    namespace: Name
    name: Name
    uid: Name


class QueueObserved(ObservedBase):
    type: Literal["QueueObserved"] = "QueueObserved"
    queue: QueueSpec


class QueueRemoved(ObservedBase):
    type: Literal["QueueRemoved"] = "QueueRemoved"
    name: Name


class PodGroupObserved(ObservedBase):
    type: Literal["PodGroupObserved"] = "PodGroupObserved"
    pod_group: PodGroupSpec


class PodGroupRemoved(ObservedBase):
    type: Literal["PodGroupRemoved"] = "PodGroupRemoved"
    namespace: Name
    name: Name


class PriorityClassObserved(ObservedBase):
    type: Literal["PriorityClassObserved"] = "PriorityClassObserved"
    priority_class: PriorityClassSpec


class TopologyObserved(ObservedBase):
    type: Literal["TopologyObserved"] = "TopologyObserved"
    topology: TopologySpec


class GpuHealthObserved(ObservedBase):
    """An NVML reading of one node's GPUs (replaces what was known of that node's devices)."""

    type: Literal["GpuHealthObserved"] = "GpuHealthObserved"
    node: Name
    gpus: Annotated[tuple[GpuDevice, ...], Field(max_length=MAX_ITEMS)]
    utilization_pct: Annotated[tuple[Percent, ...], Field(max_length=MAX_ITEMS)] = ()


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

    v: Int64 = SCHEMA_VERSION
    decision_id: Name
    ts: Ts
    pool: Name = DEFAULT_POOL
    input_offset: Int64
    config_hash: Name
    code_version: Name
    action: ActionName
    namespace: Name
    name: Name
    uid: Name
    job: Text
    queue: Name
    reason: Text = ""
    prev_hash: Name = ""


class BindRequested(DecisionBase):
    """A bind; ``dra_devices``: the node's devices allocated to the pod's DRA claims (the binder writes them to the
    claims' ``status.allocation`` before the binding)."""

    type: Literal["BindRequested"] = "BindRequested"
    node: Name
    gpu_indices: GpuIndices = ()
    gpu_fraction_milli: Count | None = None
    dra_devices: Annotated[tuple[DraAllocation, ...], Field(max_length=MAX_ITEMS)] = ()


class EvictionRequested(DecisionBase):
    """An eviction; ``preemptor`` is the job (``ns/group``, or ``ns/pod`` for a lone pod) it makes room for and
    ``preemptor_queue`` that job's queue (both None for a stale-gang eviction)."""

    type: Literal["EvictionRequested"] = "EvictionRequested"
    node: Name | None = None
    preemptor: Text | None = None
    preemptor_queue: Name | None = None
    details: Labels = {}


class PodPipelined(DecisionBase):
    type: Literal["PodPipelined"] = "PodPipelined"
    node: Name
    gpu_indices: GpuIndices = ()
    waiting_for: Annotated[tuple[Text, ...], Field(max_length=MAX_ITEMS * 64)] = ()


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
    "BindBackoff",
    "HeldForStarvingJob",
    "ResourceClaimUnusable",
]


class PodPending(DecisionBase):
    """A pod left pending this cycle, with a machine-readable reason.

    ``predicates`` counts nodes per failed predicate (e.g. {"InsufficientGPU": 12}).
    """

    type: Literal["PodPending"] = "PodPending"
    code: PendingCode
    predicates: Annotated[dict[Text, Count], Field(max_length=MAX_ITEMS)] = {}
    details: Labels = {}


# --------------------------------------------------------------------------- outcomes


class OutcomeBase(Model):
    v: Int64 = SCHEMA_VERSION
    event_id: Name
    ts: Ts
    pool: Name = DEFAULT_POOL
    decision_id: Name
    namespace: Name
    name: Name
    uid: Name


class PodBound(OutcomeBase):
    type: Literal["PodBound"] = "PodBound"
    node: Name
    gpu_indices: GpuIndices = ()
    already: bool = False


class BindFailed(OutcomeBase):
    """A bind that did not happen. ``pod_gone``: the API server has no pod of that uid (404, or replaced), so
    the failure is final: the scheduler forgets the pod until it is observed again, instead of deciding the
    same bind once more every cycle."""

    type: Literal["BindFailed"] = "BindFailed"
    node: Name
    error: Text
    pod_gone: bool = False


class PodEvicted(OutcomeBase):
    type: Literal["PodEvicted"] = "PodEvicted"
    already: bool = False


class EvictionFailed(OutcomeBase):
    type: Literal["EvictionFailed"] = "EvictionFailed"
    error: Text


# --------------------------------------------------------------------------- recorded configuration


class ConfigRecorded(Model):
    """The scheduler config a processor decides with, published to the decisions topic (keyed by pool)
    before that pool's first decision under it, so replay can rebuild decisions with the recorded config.

    ``config`` is the canonical JSON of ``SchedulerConfig``; ``config_hash`` is what decisions carry.
    Not a decision: it is not part of the hash chain and ``loads_decision`` rejects it; read the decisions
    topic with ``loads_decisions_record``.
    """

    type: Literal["ConfigRecorded"] = "ConfigRecorded"
    v: Int64 = SCHEMA_VERSION
    ts: Ts
    pool: Name = DEFAULT_POOL
    config_hash: Name
    code_version: Name
    config: Annotated[str, Field(max_length=MAX_TEXT * 64)]
    emulation: Annotated[str, Field(max_length=MAX_TEXT * 4)] = ""
    """For a simulated run (a trace run): the canonical JSON of how its emulated cluster answered and when it
    cycled (``kai_stream.emulation.recorded``), so a what-if re-runs it the same way; empty for a live run."""


class QueueShare(Model):
    """One queue's standing at a moment: fair share, deserved (quota) and allocated, per resource.

    Units as in ``Resources``; a deserved of -1 in a field means unlimited quota.
    """

    queue: Name
    fair_share: ResourceAmounts
    deserved: ResourceAmounts
    allocated: ResourceAmounts


class FairShareRecorded(Model):
    """Every queue's fair share after a cycle, published to the decisions topic whenever it changed.

    Emitted by the trace simulator (and processors that choose to) so analytics can plot allocation against
    fair share over time. Not a decision: not in the hash chain; ``loads_decisions_record`` accepts it.
    """

    type: Literal["FairShareRecorded"] = "FairShareRecorded"
    v: Int64 = SCHEMA_VERSION
    ts: Ts
    pool: Name = DEFAULT_POOL
    input_offset: Int64
    config_hash: Name
    queues: Annotated[tuple[QueueShare, ...], Field(max_length=MAX_ITEMS * 64)]


# --------------------------------------------------------------------------- dead letters


class DeadLetter(Model):
    """A record a consumer could not use, parked on the dead-letter topic with the reason.

    ``value_b64`` holds the record's bytes, ``value_text`` the same bytes as text when they are UTF-8; both
    are cut to the first ``DEAD_LETTER_KEEP`` bytes (``truncated`` then set, ``size`` is the original length),
    and ``reason`` and ``key`` to ``MAX_TEXT`` characters, so a dead letter always fits a producer's request
    limit whatever it parks. ``ts`` is the original record's timestamp (seconds, clamped to ``[0, MAX_TS]``);
    ``event_id`` is stable for (topic, partition, offset).
    """

    v: Int64 = SCHEMA_VERSION
    type: Literal["DeadLetter"] = "DeadLetter"
    event_id: Name
    ts: Ts
    topic: Name
    partition: Int64
    offset: Int64
    key: Text | None = None
    value_text: Annotated[str, Field(max_length=DEAD_LETTER_KEEP)] | None = None
    value_b64: Annotated[str, Field(max_length=4 * DEAD_LETTER_KEEP // 3 + 4)]
    size: Count = 0
    truncated: bool = False
    reason: Text

    @classmethod
    def from_raw(
        cls, *, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, reason: str, ts: float
    ) -> DeadLetter:
        raw = value or b""
        kept = raw[:DEAD_LETTER_KEEP]
        text: str | None = None
        for cut in range(4 if len(kept) < len(raw) else 1):
            try:
                text = kept[: len(kept) - cut].decode("utf-8")
                break
            except UnicodeDecodeError:
                continue
        return cls(
            event_id=cls.id_for(topic, partition, offset),
            ts=min(max(ts, 0.0), MAX_TS) if ts == ts else 0.0,
            topic=topic[:MAX_NAME],
            partition=partition,
            offset=offset,
            key=key[:MAX_TEXT].decode("utf-8", "replace")[:MAX_TEXT] if key is not None else None,
            value_text=text,
            value_b64=base64.b64encode(kept).decode("ascii"),
            size=len(raw),
            truncated=len(kept) < len(raw),
            reason=reason[:MAX_TEXT],
        )

    @staticmethod
    def id_for(topic: str, partition: int, offset: int) -> str:
        """The ``event_id`` of the dead letter of the record at (topic, partition, offset)."""
        return stable_id("dead-letter", topic[:MAX_NAME], str(partition), str(offset))

    def raw_value(self) -> bytes:
        """The record's bytes (its first ``DEAD_LETTER_KEEP`` when ``truncated``)."""
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


ObjectKey = tuple[str, str, str]
"""A cluster object: (kind, namespace or "", name)."""


def event_key(event: AnyEvent) -> ObjectKey | None:
    """The object an observed/removed event is about (None for Ticks, outcomes and decisions)."""
    match event:
        case NodeObserved(node=node):
            return ("Node", "", node.name)
        case NodeRemoved(name=name):
            return ("Node", "", name)
        case PodObserved(pod=pod):
            return ("Pod", pod.namespace, pod.name)
        case PodRemoved(namespace=namespace, name=name):
            return ("Pod", namespace, name)
        case QueueObserved(queue=queue):
            return ("Queue", "", queue.name)
        case QueueRemoved(name=name):
            return ("Queue", "", name)
        case PodGroupObserved(pod_group=group):
            return ("PodGroup", group.namespace, group.name)
        case PodGroupRemoved(namespace=namespace, name=name):
            return ("PodGroup", namespace, name)
        case PriorityClassObserved(priority_class=pc):
            return ("PriorityClass", "", pc.name)
        case TopologyObserved(topology=topology):
            return ("Topology", "", topology.name)
    return None


_BOOKKEEPING = frozenset({"event_id", "ts", "resource_version"})


def content_digest(event: ObservedBase) -> str:
    """Digest of what the scheduler reads from an observed event: all of it but its bookkeeping fields."""
    body = event.model_dump(mode="json", exclude=set(_BOOKKEEPING))
    return hashlib.blake2b(orjson.dumps(body, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()
