"""Kubernetes objects (dicts from the API or YAML) -> observed events; whole-scenario validation.

Accepts the manifests KAI users write, unchanged: v1 Node and Pod, ``scheduling.run.ai/v2`` Queue,
``scheduling.run.ai/v2alpha2`` PodGroup, ``scheduling.k8s.io/v1`` PriorityClass and
``kai.scheduler/v1alpha1`` Topology, and the ``resource.k8s.io`` DRA objects (DeviceClass, ResourceClaim,
ResourceClaimTemplate, ResourceSlice), which give no events of their own: they are counted into pods and nodes
(``core.dra``). Units are converted to the event schema's (GPU milli-devices, CPU
millicores, memory bytes; a Queue's memory is in MB = 10^6 bytes). Every error is a ``ManifestError``
naming the object (kind, namespace/name) and the field.

Conventions (documented in ``events.PodSpec`` too):

* a Pod is ours when ``spec.schedulerName`` equals the configured scheduler name; a foreign pod is emitted
  only when bound (``managed=False``, ``queue=""``, any phase, so that its end is seen) because it still
  consumes its node's resources while it runs;
* a Pod with ``spec.nodeName`` is already running there (phase ``Running`` unless ``status.phase`` says
  otherwise); annotation ``kai.scheduler/gpu-indices`` ("0,1") names its GPUs when known;
* queue: label ``kai.scheduler/queue``, else the PodGroup's queue (resolved by the scheduler), else the
  configured default queue;
* cluster-scoped objects (Queue, PriorityClass, Topology) go to every pool (``pool="*"``);
* a Queue's ``spec.preemptMinRuntime`` and ``spec.reclaimMinRuntime`` (KAI's) are read into their own fields,
  each a number of seconds or a Go duration ("15m", "4h", "1h30m"), ``-1`` for never; ``spec.minRuntime`` is
  our shorthand that stands for either one where it is unset. How they are inherited and resolved is the
  ``minruntime`` plugin's business (see its module docstring).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

import orjson
import yaml

from kai_stream.core.dra import API_VERSIONS, DRA_KINDS, LABEL_DRA_GPUS, NAMESPACED, DraIndex
from kai_stream.core.events import (
    ALL_POOLS,
    DEFAULT_POOL,
    DraRequest,
    NodeAffinityTerm,
    NodeObserved,
    NodeSelectorRequirement,
    NodeSpec,
    ObservedEvent,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodSpec,
    PriorityClassObserved,
    PriorityClassSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
    SubGroupSpec,
    Taint,
    Toleration,
    TopologyConstraint,
    TopologyObserved,
    TopologySpec,
    stable_id,
)
from kai_stream.core.quantities import parse_quantity, to_bytes, to_milli
from kai_stream.core.schema import instance_errors
from kai_stream.core.schemas import SCHEMAS

__all__ = [
    "ANNOTATION_DURATION",
    "ANNOTATION_GPU_FRACTION",
    "ANNOTATION_GPU_INDICES",
    "ANNOTATION_GPU_MEMORY",
    "ANNOTATION_POD_GROUP",
    "LABEL_NODE_POOL",
    "LABEL_QUEUE",
    "ManifestError",
    "load_scenario",
    "object_to_events",
    "validate_manifests",
]

LABEL_QUEUE = "kai.scheduler/queue"
LABEL_SUBGROUP = "kai.scheduler/subgroup-name"
LABEL_NODE_POOL = "kai.scheduler/node-pool"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
ANNOTATION_POD_GROUP = "pod-group-name"
ANNOTATION_GPU_FRACTION = "gpu-fraction"
ANNOTATION_GPU_FRACTION_DEVICES = "gpu-fraction-num-devices"
ANNOTATION_GPU_MEMORY = "gpu-memory"
ANNOTATION_DURATION = "kai.scheduler/duration-seconds"
ANNOTATION_GPU_INDICES = "kai.scheduler/gpu-indices"
GPU_RESOURCE = "nvidia.com/gpu"
MB = 10**6

_KIND_ORDER = ("PriorityClass", "Topology", "Queue", "Node", "PodGroup", "Pod")
_API_VERSIONS: dict[str, tuple[str, ...]] = {
    "Node": ("v1",),
    "Pod": ("v1",),
    "Queue": ("scheduling.run.ai/v2",),
    "PodGroup": ("scheduling.run.ai/v2alpha2",),
    "PriorityClass": ("scheduling.k8s.io/v1",),
    "Topology": ("kai.scheduler/v1alpha1",),
    **{kind: API_VERSIONS for kind in DRA_KINDS},
}


class ManifestError(ValueError):
    """A manifest that cannot be turned into events; the message names the object and the field."""

    def __init__(self, kind: str, name: str, field: str, problem: str) -> None:
        self.kind = kind
        self.name = name
        self.field = field
        self.problem = problem
        super().__init__(f"{kind} {name or '<unnamed>'}: {field}: {problem}")


class _Obj:
    """One manifest being read: typed accessors that raise ``ManifestError`` naming the field."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj
        self.kind = str(obj.get("kind", ""))
        meta = obj.get("metadata")
        self.meta: Mapping[str, Any] = meta if isinstance(meta, Mapping) else {}
        self.name = str(self.meta.get("name", ""))
        self.namespace = str(self.meta.get("namespace") or "default")
        self.display = (
            self.name
            if self.kind in ("Node", "Queue", "PriorityClass", "Topology")
            else (f"{self.namespace}/{self.name}")
        )

    def error(self, field: str, problem: str) -> ManifestError:
        return ManifestError(self.kind, self.display, field, problem)

    def get(self, path: str, default: Any = None) -> Any:
        node: Any = self.obj
        for part in path.split("."):
            if node is None:
                return default
            if not isinstance(node, Mapping):
                raise self.error(path, f"expected a mapping at '{part}', got {type(node).__name__}")
            node = node.get(part)
        return default if node is None else node

    def mapping(self, path: str) -> Mapping[str, Any]:
        value = self.get(path, {})
        if not isinstance(value, Mapping):
            raise self.error(path, f"expected a mapping, got {type(value).__name__}")
        return value

    def str_map(self, path: str) -> dict[str, str]:
        return {str(k): str(v) for k, v in sorted(self.mapping(path).items())}

    def items(self, path: str) -> list[Mapping[str, Any]]:
        value = self.get(path, [])
        if not isinstance(value, list):
            raise self.error(path, f"expected a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise self.error(f"{path}[{i}]", f"expected a mapping, got {type(item).__name__}")
        return value

    def integer(self, path: str, default: int) -> int:
        value = self.get(path, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(path, f"expected an integer, got {value!r}")
        return value

    def number(self, path: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise self.error(path, f"expected a number, got {value!r}")
        try:
            return float(parse_quantity(value, path))
        except ValueError as exc:
            raise self.error(path, str(exc).split(": ", 1)[-1]) from None

    def milli(self, path: str, value: Any) -> int:
        try:
            return to_milli(value, path)
        except ValueError as exc:
            raise self.error(path, str(exc).split(": ", 1)[-1]) from None

    def bytes_(self, path: str, value: Any) -> int:
        try:
            return to_bytes(value, path)
        except ValueError as exc:
            raise self.error(path, str(exc).split(": ", 1)[-1]) from None

    def created(self, default: float) -> float:
        stamp = self.meta.get("creationTimestamp")
        if stamp is None:
            return default
        if isinstance(stamp, datetime):
            return stamp.timestamp()
        try:
            return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise self.error("metadata.creationTimestamp", f"not an RFC 3339 time: {stamp!r}") from None

    def uid(self) -> str:
        return str(self.meta.get("uid") or stable_id(self.kind, self.namespace, self.name))

    def resource_version(self) -> int | None:
        """``metadata.resourceVersion`` as the number the API server (etcd) gives it; None when absent or not
        a number."""
        version = str(self.meta.get("resourceVersion", ""))
        if version.isdigit() and len(version) < 19:
            return int(version)
        return None

    def event_id(self) -> str:
        version = self.meta.get("resourceVersion")
        if version is not None:
            return stable_id(self.kind, self.uid(), str(version))
        digest = hashlib.sha256(orjson.dumps(self.obj, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()
        return stable_id(self.kind, self.uid(), digest)


# --------------------------------------------------------------------------- per kind


def _resources(o: _Obj, path: str, source: Mapping[str, Any]) -> Resources:
    return Resources(
        gpu_milli=o.milli(f"{path}.{GPU_RESOURCE}", source[GPU_RESOURCE]) if GPU_RESOURCE in source else 0,
        cpu_milli=o.milli(f"{path}.cpu", source["cpu"]) if "cpu" in source else 0,
        memory=o.bytes_(f"{path}.memory", source["memory"]) if "memory" in source else 0,
    )


def _node(o: _Obj, ts: float, dra: DraIndex | None) -> list[ObservedEvent]:
    labels = o.str_map("metadata.labels")
    allocatable = o.mapping("status.allocatable") or o.mapping("status.capacity")
    path = "status.allocatable" if o.mapping("status.allocatable") else "status.capacity"
    resources = _resources(o, path, allocatable)
    if resources.gpu_milli % 1000:
        raise o.error(f"{path}.{GPU_RESOURCE}", "must be a whole number of devices")
    dra_devices = dra.node_devices(o.name) if dra is not None else ()
    if dra_devices:
        resources = resources.model_copy(update={"gpu_milli": resources.gpu_milli + len(dra_devices) * 1000})
        labels = {**labels, LABEL_DRA_GPUS: str(len(dra_devices))}
    gpu_memory = 0
    if LABEL_GPU_MEMORY in labels:
        gpu_memory = int(o.number(f"metadata.labels.{LABEL_GPU_MEMORY}", labels[LABEL_GPU_MEMORY]))
    ready = True
    for i, condition in enumerate(o.items("status.conditions")):
        if condition.get("type") == "Ready":
            ready = str(condition.get("status", "")) == "True"
            if condition.get("status") not in ("True", "False", "Unknown"):
                raise o.error(f"status.conditions[{i}].status", f"expected True/False/Unknown, got {condition!r}")
    taints = []
    for i, taint in enumerate(o.items("spec.taints")):
        if "key" not in taint:
            raise o.error(f"spec.taints[{i}].key", "missing")
        taints.append(
            Taint(
                key=str(taint["key"]), value=str(taint.get("value", "")), effect=str(taint.get("effect", "NoSchedule"))
            )
        )
    pool = labels.get(LABEL_NODE_POOL, DEFAULT_POOL)
    spec = NodeSpec(
        name=o.name,
        uid=o.uid(),
        pool=pool,
        labels=labels,
        allocatable=resources,
        gpu_memory_mib=gpu_memory,
        ready=ready,
        unschedulable=bool(o.get("spec.unschedulable", False)),
        taints=tuple(taints),
        created=o.created(ts),
        dra_devices=dra_devices,
    )
    return [NodeObserved(event_id=o.event_id(), ts=ts, pool=pool, node=spec, resource_version=o.resource_version())]


def _queue_resource(o: _Obj, name: str, scale: int) -> QueueResource:
    base = f"spec.resources.{name}"
    section = o.mapping(base)
    if not section:
        return QueueResource(quota=0 if name == "gpu" else -1)
    values: dict[str, int] = {}
    for key, field in (("quota", "quota"), ("limit", "limit")):
        raw = section.get(key, -1 if key == "limit" else 0)
        amount = o.number(f"{base}.{key}", raw)
        if amount < 0 and amount != -1:
            raise o.error(f"{base}.{key}", f"must be -1 (unlimited) or >= 0, got {raw!r}")
        values[field] = -1 if amount == -1 else round(amount * scale)
    weight = o.number(f"{base}.overQuotaWeight", section.get("overQuotaWeight", 1))
    if weight < 0 or weight != int(weight):
        raise o.error(f"{base}.overQuotaWeight", f"must be a non-negative integer, got {weight!r}")
    return QueueResource(quota=values["quota"], over_quota_weight=int(weight), limit=values["limit"])


_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _duration(o: _Obj, path: str, value: Any) -> float:
    """Seconds from a number or a Go duration string ("90s", "5m", "1h30m")."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    total, number = 0.0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else ch
        if unit not in _DURATION_UNITS or not number:
            raise o.error(path, f"expected seconds or a duration like 5m, got {value!r}")
        total += float(number) * _DURATION_UNITS[unit]
        number = ""
        i += len(unit)
    if number:
        total += float(number)
    return total


def _min_runtime(o: _Obj, key: str) -> float | None:
    """``spec.<key>`` in seconds (a number or a duration like "15m"), None when absent; -1 (never) or >= 0."""
    path = f"spec.{key}"
    raw = o.get(path)
    if raw is None:
        return None
    seconds = -1.0 if isinstance(raw, str) and raw.strip() == "-1" else _duration(o, path, raw)
    if seconds < 0 and seconds != -1:
        raise o.error(path, f"must be -1 (never) or >= 0, got {raw!r}")
    return seconds


def _queue(o: _Obj, ts: float) -> list[ObservedEvent]:
    parent = o.get("spec.parentQueue")
    spec = QueueSpec(
        name=o.name,
        uid=o.uid(),
        parent=str(parent) if parent else None,
        priority=o.integer("spec.priority", 100),
        resources=QueueResources(
            gpu=_queue_resource(o, "gpu", 1000),
            cpu=_queue_resource(o, "cpu", 1),
            memory=_queue_resource(o, "memory", MB),
        ),
        min_runtime_s=_min_runtime(o, "minRuntime"),
        preempt_min_runtime_s=_min_runtime(o, "preemptMinRuntime"),
        reclaim_min_runtime_s=_min_runtime(o, "reclaimMinRuntime"),
        created=o.created(ts),
    )
    return [QueueObserved(event_id=o.event_id(), ts=ts, pool=ALL_POOLS, queue=spec)]


def _topology_constraint(constraint: Mapping[str, Any]) -> TopologyConstraint | None:
    """A ``topologyConstraint`` (the pod group's or a subgroup's); None when empty."""
    if not constraint:
        return None
    return TopologyConstraint(
        required_level=constraint.get("requiredTopologyLevel"),
        preferred_level=constraint.get("preferredTopologyLevel"),
        topology=constraint.get("topology"),
    )


def _pod_group(o: _Obj, ts: float) -> list[ObservedEvent]:
    labels = o.str_map("metadata.labels")
    queue = o.get("spec.queue") or labels.get(LABEL_QUEUE)
    if not queue:
        raise o.error("spec.queue", "missing (or label kai.scheduler/queue)")
    min_member = o.integer("spec.minMember", 1)
    if min_member < 0:
        raise o.error("spec.minMember", f"must be >= 0, got {min_member}")
    preemptibility = o.get("spec.preemptibility")
    if preemptibility not in (None, "preemptible", "non-preemptible"):
        raise o.error("spec.preemptibility", f"expected preemptible | non-preemptible, got {preemptibility!r}")
    topology = _topology_constraint(o.mapping("spec.topologyConstraint"))
    pool = labels.get(LABEL_NODE_POOL, DEFAULT_POOL)
    raw_subgroups = o.get("spec.subGroups") or []
    if not isinstance(raw_subgroups, list):
        raise o.error("spec.subGroups", "expected a list")
    sub_groups: list[SubGroupSpec] = []
    for i, entry in enumerate(raw_subgroups):
        field = f"spec.subGroups[{i}]"
        if not isinstance(entry, dict) or not entry.get("name"):
            raise o.error(field, "expected a mapping with a name")
        member = entry.get("minMember", 1)
        if isinstance(member, bool) or not isinstance(member, int) or member < 1:
            raise o.error(f"{field}.minMember", f"must be an integer >= 1, got {member!r}")
        parent = entry.get("parent")
        name = str(entry["name"])
        constraint = entry.get("topologyConstraint")
        if constraint is not None and not isinstance(constraint, Mapping):
            raise o.error(f"{field}.topologyConstraint", "expected a mapping")
        sub_groups.append(
            SubGroupSpec(
                name=name,
                min_member=member,
                parent=str(parent) if parent else None,
                topology_constraint=_topology_constraint(constraint or {}),
            )
        )
    spec = PodGroupSpec(
        namespace=o.namespace,
        name=o.name,
        uid=o.uid(),
        queue=str(queue),
        min_member=max(min_member, 1),
        priority_class=o.get("spec.priorityClassName"),
        preemptible=None if preemptibility is None else preemptibility == "preemptible",
        topology_constraint=topology,
        sub_groups=tuple(sub_groups),
        pool=pool,
        created=o.created(ts),
    )
    return [PodGroupObserved(event_id=o.event_id(), ts=ts, pool=pool, pod_group=spec)]


def _priority_class(o: _Obj, ts: float) -> list[ObservedEvent]:
    if "value" not in o.obj:
        raise o.error("value", "missing")
    value = o.obj["value"]
    if isinstance(value, bool) or not isinstance(value, int):
        raise o.error("value", f"expected an integer, got {value!r}")
    spec = PriorityClassSpec(name=o.name, value=value)
    return [PriorityClassObserved(event_id=o.event_id(), ts=ts, pool=ALL_POOLS, priority_class=spec)]


def _topology(o: _Obj, ts: float) -> list[ObservedEvent]:
    levels = []
    for i, level in enumerate(o.items("spec.levels")):
        if not level.get("nodeLabel"):
            raise o.error(f"spec.levels[{i}].nodeLabel", "missing")
        levels.append(str(level["nodeLabel"]))
    spec = TopologySpec(name=o.name, levels=tuple(levels))
    return [TopologyObserved(event_id=o.event_id(), ts=ts, pool=ALL_POOLS, topology=spec)]


def _pod_requests(o: _Obj) -> Resources:
    total = {"gpu_milli": 0, "cpu_milli": 0, "memory": 0}
    for i, container in enumerate(o.items("spec.containers")):
        resources = container.get("resources") or {}
        if not isinstance(resources, Mapping):
            raise o.error(f"spec.containers[{i}].resources", "expected a mapping")
        for section in ("limits", "requests"):
            if resources.get(section) is not None and not isinstance(resources.get(section), Mapping):
                raise o.error(f"spec.containers[{i}].resources.{section}", "expected a mapping")
        requests = dict(resources.get("limits") or {})
        requests.update(resources.get("requests") or {})
        got = _resources(o, f"spec.containers[{i}].resources.requests", requests)
        total["gpu_milli"] += got.gpu_milli
        total["cpu_milli"] += got.cpu_milli
        total["memory"] += got.memory
    for i, container in enumerate(o.items("spec.initContainers")):
        resources = container.get("resources") or {}
        requests = dict(resources.get("limits") or {})
        requests.update(resources.get("requests") or {})
        got = _resources(o, f"spec.initContainers[{i}].resources.requests", requests)
        total["gpu_milli"] = max(total["gpu_milli"], got.gpu_milli)
        total["cpu_milli"] = max(total["cpu_milli"], got.cpu_milli)
        total["memory"] = max(total["memory"], got.memory)
    if total["gpu_milli"] % 1000:
        raise o.error(f"spec.containers[].resources.{GPU_RESOURCE}", "whole devices only; use gpu-fraction")
    return Resources(**total)


def _affinity(o: _Obj) -> tuple[NodeAffinityTerm, ...]:
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    terms = []
    for i, term in enumerate(o.items(base)):
        requirements = []
        for j, expr in enumerate(term.get("matchExpressions") or []):
            field = f"{base}[{i}].matchExpressions[{j}]"
            if not isinstance(expr, Mapping) or "key" not in expr:
                raise o.error(field, "expected a mapping with key, operator, values")
            if expr.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
                raise o.error(f"{field}.operator", f"unsupported operator {expr.get('operator')!r}")
            requirements.append(
                NodeSelectorRequirement(
                    key=str(expr["key"]),
                    operator=expr["operator"],
                    values=tuple(str(v) for v in expr.get("values") or ()),
                )
            )
        terms.append(NodeAffinityTerm(match_expressions=tuple(requirements)))
    return tuple(terms)


def _tolerations(o: _Obj) -> tuple[Toleration, ...]:
    result = []
    for i, tol in enumerate(o.items("spec.tolerations")):
        operator = tol.get("operator", "Equal")
        if operator not in ("Equal", "Exists"):
            raise o.error(f"spec.tolerations[{i}].operator", f"expected Equal | Exists, got {operator!r}")
        result.append(
            Toleration(
                key=str(tol.get("key", "")),
                operator=operator,
                value=str(tol.get("value", "")),
                effect=str(tol.get("effect", "")),
            )
        )
    return tuple(result)


def _start_time(o: _Obj) -> float | None:
    stamp = o.get("status.startTime")
    if stamp is None:
        return None
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise o.error("status.startTime", f"not an RFC 3339 time: {stamp!r}") from None


def _requiring(affinity: tuple[NodeAffinityTerm, ...], operator: str) -> tuple[NodeAffinityTerm, ...]:
    """``affinity`` with ``LABEL_DRA_GPUS`` ``operator`` (Exists / DoesNotExist) added to every term."""
    needs = NodeSelectorRequirement.model_validate({"key": LABEL_DRA_GPUS, "operator": operator})
    terms = tuple(t.model_copy(update={"match_expressions": (*t.match_expressions, needs)}) for t in affinity)
    return terms or (NodeAffinityTerm(match_expressions=(needs,)),)


class _Claims(NamedTuple):
    requests: Resources
    affinity: tuple[NodeAffinityTerm, ...]
    refused: str | None = None
    dra: tuple[DraRequest, ...] = ()


def _dra_claims(
    o: _Obj, dra: DraIndex | None, requests: Resources, affinity: tuple[NodeAffinityTerm, ...], plugin_gpu: bool
) -> _Claims:
    """The pod's DRA GPUs added to its request, with a required affinity on nodes that publish GPU devices, and its
    claim requests; or why its claims cannot be served. A pod of device-plugin GPUs (``plugin_gpu``) keeps off those
    nodes once any node publishes GPU devices: the devices of a DRA node are not the device plugin's."""
    if not o.items("spec.resourceClaims"):
        if plugin_gpu and dra is not None and dra.has_gpu_slices():
            return _Claims(requests, _requiring(affinity, "DoesNotExist"))
        return _Claims(requests, affinity)
    if plugin_gpu:
        return _Claims(requests, affinity, "DRA claims and device-plugin GPUs (nvidia.com/gpu, gpu-fraction, "
                       "gpu-memory) in one pod are not supported")
    claimed, refused = (dra or DraIndex()).pod_requests(o.obj)
    gpus = sum(r.count for r in claimed)
    if refused is not None or not gpus:
        return _Claims(requests, affinity, refused)
    return _Claims(requests.model_copy(update={"gpu_milli": requests.gpu_milli + gpus * 1000}),
                   _requiring(affinity, "Exists"), None, claimed)


def _pod(o: _Obj, ts: float, scheduler_name: str, dra: DraIndex | None = None) -> list[ObservedEvent]:
    labels = o.str_map("metadata.labels")
    annotations = o.str_map("metadata.annotations")
    node_name = o.get("spec.nodeName")
    phase = o.get("status.phase") or ("Running" if node_name else "Pending")
    if phase not in ("Pending", "Running", "Succeeded", "Failed"):
        raise o.error("status.phase", f"expected Pending | Running | Succeeded | Failed, got {phase!r}")
    managed = o.get("spec.schedulerName", "default-scheduler") == scheduler_name
    if not managed and not node_name:
        return []
    requests = _pod_requests(o)
    fraction: int | None = None
    gpu_memory: int | None = None
    if ANNOTATION_GPU_FRACTION in annotations:
        field = f"metadata.annotations.{ANNOTATION_GPU_FRACTION}"
        fraction = o.milli(field, annotations[ANNOTATION_GPU_FRACTION])
        if not 0 < fraction <= 1000:
            raise o.error(field, f"must be in (0, 1], got {annotations[ANNOTATION_GPU_FRACTION]!r}")
        if requests.gpu_milli:
            raise o.error(field, f"cannot be combined with a {GPU_RESOURCE} request")
        requests = requests.model_copy(update={"gpu_milli": fraction})
    devices = 1
    if ANNOTATION_GPU_FRACTION_DEVICES in annotations:
        field = f"metadata.annotations.{ANNOTATION_GPU_FRACTION_DEVICES}"
        if fraction is None:
            raise o.error(field, f"needs {ANNOTATION_GPU_FRACTION}")
        count = o.number(field, annotations[ANNOTATION_GPU_FRACTION_DEVICES])
        if count != int(count) or count < 1:
            raise o.error(field, f"must be a whole number >= 1, got {annotations[ANNOTATION_GPU_FRACTION_DEVICES]!r}")
        devices = int(count)
    if ANNOTATION_GPU_MEMORY in annotations:
        field = f"metadata.annotations.{ANNOTATION_GPU_MEMORY}"
        gpu_memory = int(o.number(field, annotations[ANNOTATION_GPU_MEMORY]))
        if gpu_memory <= 0:
            raise o.error(field, "must be a positive number of MiB")
        if fraction is not None or requests.gpu_milli:
            raise o.error(field, "cannot be combined with gpu-fraction or a GPU request")
    duration: float | None = None
    if ANNOTATION_DURATION in annotations:
        duration = o.number(f"metadata.annotations.{ANNOTATION_DURATION}", annotations[ANNOTATION_DURATION])
        if duration < 0:
            raise o.error(f"metadata.annotations.{ANNOTATION_DURATION}", "must be >= 0")
    gpu_indices: tuple[int, ...] | None = None
    if node_name and ANNOTATION_GPU_INDICES in annotations:
        field = f"metadata.annotations.{ANNOTATION_GPU_INDICES}"
        try:
            gpu_indices = tuple(int(p) for p in annotations[ANNOTATION_GPU_INDICES].split(",") if p.strip())
        except ValueError:
            raise o.error(
                field, f"expected comma-separated GPU indices, got {annotations[ANNOTATION_GPU_INDICES]!r}"
            ) from None
    priority = o.get("spec.priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise o.error("spec.priority", f"expected an integer, got {priority!r}")
    node_selector = o.str_map("spec.nodeSelector")
    pool = labels.get(LABEL_NODE_POOL) or node_selector.get(LABEL_NODE_POOL) or DEFAULT_POOL
    plugin_gpu = requests.gpu_milli > 0 or gpu_memory is not None
    requests, affinity, refused, claimed = _dra_claims(o, dra, requests, _affinity(o), plugin_gpu)
    if node_name and claimed and gpu_indices is None and dra is not None:
        gpu_indices = dra.allocated_indices(o.obj, claimed, str(node_name))
    spec = PodSpec(
        namespace=o.namespace,
        name=o.name,
        uid=o.uid(),
        queue=labels.get(LABEL_QUEUE, "") if managed else "",
        pod_group=annotations.get(ANNOTATION_POD_GROUP) or labels.get(ANNOTATION_POD_GROUP) if managed else None,
        sub_group=labels.get(LABEL_SUBGROUP) if managed else None,
        pool=pool,
        requests=requests,
        gpu_fraction_milli=fraction,
        gpu_fraction_devices=devices,
        gpu_memory_mib=gpu_memory,
        priority_class=o.get("spec.priorityClassName") or labels.get("priorityClassName"),
        priority=priority,
        node_name=str(node_name) if node_name else None,
        gpu_indices=gpu_indices,
        phase=phase,
        terminating=o.meta.get("deletionTimestamp") is not None,
        node_selector=node_selector,
        affinity=affinity,
        tolerations=_tolerations(o),
        labels=labels,
        duration_s=duration,
        created=o.created(ts),
        started=_start_time(o) if node_name else None,
        managed=managed,
        refused=refused if managed else None,
        dra_requests=claimed,
    )
    return [PodObserved(event_id=o.event_id(), ts=ts, pool=pool, pod=spec, resource_version=o.resource_version())]


def object_to_events(
    obj: Mapping[str, Any], *, ts: float, scheduler_name: str = "kai-scheduler", dra: DraIndex | None = None
) -> list[ObservedEvent]:
    """Convert one Kubernetes object to observed events ([] for a pod another scheduler has not bound, and for the
    DRA objects, which ``dra`` holds: a pod's claims and a node's ResourceSlices are read from it)."""
    if not isinstance(obj, Mapping):
        raise ManifestError("<object>", "", "<root>", f"expected a mapping, got {type(obj).__name__}")
    o = _Obj(obj)
    if o.kind not in _API_VERSIONS:
        raise ManifestError(
            o.kind or "<no kind>", o.name, "kind", f"unknown kind {o.kind!r}; known: {list(_KIND_ORDER)}"
        )
    if obj.get("apiVersion") not in _API_VERSIONS[o.kind]:
        raise o.error("apiVersion", f"expected {' | '.join(_API_VERSIONS[o.kind])}, got {obj.get('apiVersion')!r}")
    if not o.name:
        raise o.error("metadata.name", "missing")
    try:
        if o.kind in DRA_KINDS:
            return []
        if o.kind == "Node":
            return _node(o, ts, dra)
        if o.kind == "Queue":
            return _queue(o, ts)
        if o.kind == "PodGroup":
            return _pod_group(o, ts)
        if o.kind == "PriorityClass":
            return _priority_class(o, ts)
        if o.kind == "Topology":
            return _topology(o, ts)
        return _pod(o, ts, scheduler_name, dra)
    except ManifestError:
        raise
    except (ValueError, TypeError) as exc:
        raise o.error("<object>", str(exc)) from None


# --------------------------------------------------------------------------- whole scenarios


def _documents(text: str) -> list[Mapping[str, Any]]:
    try:
        raw = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ManifestError("<file>", "", "<yaml>", f"not valid YAML: {exc}") from None
    docs: list[Mapping[str, Any]] = []
    for i, doc in enumerate(raw):
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise ManifestError("<document>", f"#{i}", "<root>", f"expected a mapping, got {type(doc).__name__}")
        if doc.get("kind") == "List":
            for j, item in enumerate(doc.get("items") or []):
                if not isinstance(item, Mapping):
                    raise ManifestError("List", f"#{i}", f"items[{j}]", "expected a mapping")
                docs.append(item)
        else:
            docs.append(doc)
    return docs


def _sort_key(event: ObservedEvent) -> tuple[int, str, str]:
    match event:
        case PriorityClassObserved(priority_class=pc):
            return (0, "", pc.name)
        case TopologyObserved(topology=t):
            return (1, "", t.name)
        case QueueObserved(queue=q):
            return (2, "", q.name)
        case NodeObserved(node=n):
            return (3, "", n.name)
        case PodGroupObserved(pod_group=g):
            return (4, g.namespace, g.name)
        case PodObserved(pod=p):
            return (5, p.namespace, p.name)
    return (6, "", event.event_id)


def _validate(events: list[ObservedEvent], default_queue: str) -> None:
    queues = {e.queue.name: e.queue for e in events if isinstance(e, QueueObserved)}
    for spec in queues.values():
        if spec.parent is not None and spec.parent not in queues:
            raise ManifestError("Queue", spec.name, "spec.parentQueue", f"queue {spec.parent!r} does not exist")
    for name in sorted(queues):
        seen = [name]
        parent = queues[name].parent
        while parent is not None:
            if parent in seen:
                cycle = " -> ".join([*seen, parent])
                raise ManifestError("Queue", name, "spec.parentQueue", f"cycle in the queue tree: {cycle}")
            seen.append(parent)
            parent = queues[parent].parent
    parents = {q.parent for q in queues.values() if q.parent is not None}
    groups = {
        f"{e.pod_group.namespace}/{e.pod_group.name}": e.pod_group for e in events if isinstance(e, PodGroupObserved)
    }
    for key in sorted(groups):
        group = groups[key]
        if group.queue not in queues:
            raise ManifestError("PodGroup", key, "spec.queue", f"queue {group.queue!r} does not exist")
        if group.queue in parents:
            raise ManifestError("PodGroup", key, "spec.queue", f"queue {group.queue!r} is not a leaf queue")
    for event in events:
        if not isinstance(event, PodObserved) or not event.pod.managed:
            continue
        pod = event.pod
        if pod.pod_group is not None and f"{pod.namespace}/{pod.pod_group}" not in groups:
            raise ManifestError(
                "Pod",
                pod.key,
                f"metadata.annotations.{ANNOTATION_POD_GROUP}",
                f"PodGroup {pod.pod_group!r} does not exist",
            )
        queue = pod.queue
        field = f"metadata.labels.{LABEL_QUEUE}"
        if not queue and pod.pod_group is not None:
            queue = groups[f"{pod.namespace}/{pod.pod_group}"].queue
        if not queue:
            queue = default_queue
            field = f"metadata.labels.{LABEL_QUEUE} (unset: default {default_queue!r})"
        if queue not in queues:
            raise ManifestError("Pod", pod.key, field, f"queue {queue!r} does not exist")
        if queue in parents:
            raise ManifestError("Pod", pod.key, field, f"queue {queue!r} is not a leaf queue")


def _check_schema(o: _Obj, lenient: bool) -> None:
    """Validate against the kind's schema (``core.schemas``); ``lenient`` lets unknown fields pass, as an API
    server with non-strict field validation would (it drops them)."""
    schema = SCHEMAS.get((str(o.obj.get("apiVersion", "")), o.kind))
    if schema is None:
        return
    errors = [e for e in instance_errors(dict(o.obj), schema) if not (lenient and e.unknown)]
    if errors:
        more = f" (and {len(errors) - 1} more: {'; '.join(map(str, errors[1:4]))})" if len(errors) > 1 else ""
        hint = "; --lenient accepts unknown fields" if errors[0].unknown else ""
        raise o.error(errors[0].path, f"{errors[0].problem}{hint}{more}")


def validate_manifests(text: str, *, lenient: bool = False) -> int:
    """Check every manifest of a multi-document YAML against its kind's schema (kinds without one pass);
    ``ManifestError`` for the first that does not validate, or for a file without objects. The object count."""
    docs = _documents(text)
    if not docs:
        raise ManifestError("Scenario", "(empty)", "documents", "no Kubernetes objects in the file")
    for doc in docs:
        _check_schema(_Obj(doc), lenient)
    return len(docs)


def load_scenario(
    text: str,
    *,
    scheduler_name: str = "kai-scheduler",
    default_queue: str = "default-queue",
    ts: float = 0.0,
    lenient: bool = False,
) -> list[ObservedEvent]:
    """Parse a multi-document YAML scenario into observed events, validating the file as a whole.

    Every manifest is checked against its kind's schema first (unknown fields are errors unless ``lenient``), and
    a file without any object is an error. Events come out in a canonical order (priority classes, topologies,
    queues, nodes, pod groups, pods; each by namespace/name), so the order of manifests in the file never
    changes the result.
    """
    events: list[ObservedEvent] = []
    seen: dict[tuple[str, str, str], int] = {}
    docs = _documents(text)
    if not docs:
        raise ManifestError("Scenario", "(empty)", "documents", "no Kubernetes objects in the file")
    dra = DraIndex()
    for doc in docs:
        if doc.get("kind") in DRA_KINDS:
            dra.upsert(doc)
        elif doc.get("kind") == "Pod":
            dra.pod_seen(doc)
    for i, doc in enumerate(docs):
        o = _Obj(doc)
        _check_schema(o, lenient)
        produced = object_to_events(doc, ts=ts, scheduler_name=scheduler_name, dra=dra)
        ident = (o.kind, o.namespace if o.kind in ("Pod", "PodGroup", *NAMESPACED) else "", o.name)
        if ident in seen:
            raise o.error("metadata.name", f"duplicate {o.kind} (documents #{seen[ident]} and #{i})")
        seen[ident] = i
        events.extend(produced)
    uids: dict[str, str] = {}
    for event in events:
        if isinstance(event, PodObserved):
            other = uids.setdefault(event.pod.uid, event.pod.key)
            if other != event.pod.key:
                raise ManifestError("Pod", event.pod.key, "metadata.uid", f"uid also used by pod {other}")
    events.sort(key=_sort_key)
    _validate(events, default_queue)
    return events
