"""The binder's last line of defence against over-commit: does a node have room for a bind, by the binder's view?

The view is what the API says right before the binding POST: the node's allocatable and every pod on the node
that is not Succeeded or Failed, terminating ones included (a pod with ``deletionTimestamp`` still holds its
devices until it is gone). A bind is refused when, with the pod added,

* the node's GPUs (whole and fractional, in milli-devices) would be over its allocatable count (device-plugin GPUs
  plus the GPU devices of its DRA ResourceSlices);
* one of the decided GPU indices would hold more than one device (pods placed there by their
  ``kai.scheduler/gpu-indices`` annotation);
* CPU or memory would be over allocatable (checked when the pod itself is known).

``lacks_room`` is pure: it returns the reason for the refusal, or None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kai_stream.core.dra import DraIndex
from kai_stream.core.events import BindRequested, NodeObserved, PodObserved, PodSpec, Resources
from kai_stream.core.manifests import ManifestError, object_to_events

UNIT = 1000


def pod_spec(obj: Mapping[str, Any]) -> PodSpec | None:
    """A bound pod's spec as the room check counts it (None for an unbound or unreadable pod)."""
    try:
        events = object_to_events({**obj, "kind": "Pod", "apiVersion": "v1"}, ts=0.0, scheduler_name="")
    except (ManifestError, KeyError, ValueError):
        return None
    return next((e.pod for e in events if isinstance(e, PodObserved)), None)


def node_allocatable(obj: Mapping[str, Any], dra: DraIndex | None = None) -> tuple[Resources, int] | None:
    """A node's allocatable (its DRA GPU devices in ``dra`` counted as GPUs) and its GPU memory (MiB), or None when
    unreadable."""
    try:
        events = object_to_events({**obj, "kind": "Node", "apiVersion": "v1"}, ts=0.0, dra=dra)
    except (ManifestError, KeyError, ValueError):
        return None
    node = next((e.node for e in events if isinstance(e, NodeObserved)), None)
    return (node.allocatable, node.gpu_memory_mib) if node is not None else None


def _gpu_milli(pod: PodSpec, gpu_memory_mib: int) -> int:
    if pod.gpu_memory_mib and not pod.requests.gpu_milli:
        return min(UNIT, pod.gpu_memory_mib * UNIT // gpu_memory_mib) if gpu_memory_mib else UNIT
    return pod.requests.gpu_milli


def _claim(decision: BindRequested, own_pod: PodSpec | None, gpu_memory_mib: int) -> tuple[int, int]:
    """The milli-GPUs the bind adds to the node and to each decided device."""
    if decision.gpu_fraction_milli:
        return decision.gpu_fraction_milli, decision.gpu_fraction_milli
    if decision.gpu_indices:
        return UNIT * len(decision.gpu_indices), UNIT
    return (_gpu_milli(own_pod, gpu_memory_mib) if own_pod is not None else 0), 0


def claimed(decision: BindRequested, own_pod: PodSpec | None, gpu_memory_mib: int) -> PodSpec:
    """The pod as it will hold the node once bound (what a reservation counts until the API shows it)."""
    gpu, _ = _claim(decision, own_pod, gpu_memory_mib)
    requests = own_pod.requests if own_pod is not None else Resources()
    return PodSpec(
        namespace=decision.namespace,
        name=decision.name,
        uid=decision.uid,
        queue="",
        requests=requests.model_copy(update={"gpu_milli": gpu}),
        node_name=decision.node,
        gpu_indices=decision.gpu_indices or None,
        phase="Running",
    )


def lacks_room(
    decision: BindRequested,
    node: Mapping[str, Any],
    on_node: Iterable[Mapping[str, Any]],
    own: Mapping[str, Any] | None = None,
    slices: Iterable[Mapping[str, Any]] = (),
) -> str | None:
    """Why ``decision`` must not be bound onto ``node`` given the pods ``on_node`` (raw objects), or None. The node's
    DRA ``slices`` add their GPU devices to its allocatable count (``core.dra``)."""
    dra = DraIndex()
    for item in slices:
        dra.upsert(item)
    parsed = node_allocatable(node, dra)
    if parsed is None:
        return None
    pods = [p for p in (pod_spec(obj) for obj in on_node) if p is not None]
    return room_verdict(decision, *parsed, pods, pod_spec(own) if own is not None else None)


def room_verdict(
    decision: BindRequested,
    allocatable: Resources,
    gpu_memory_mib: int,
    on_node: Iterable[PodSpec],
    own_pod: PodSpec | None,
) -> str | None:
    """``lacks_room`` over parsed pods: the node's ``allocatable`` and the pods counted on it."""
    used = [0, 0, 0]
    devices: dict[int, int] = {}
    holders: list[str] = []
    for pod in on_node:
        if pod.uid == decision.uid or pod.phase in ("Succeeded", "Failed"):
            continue
        gpu = _gpu_milli(pod, gpu_memory_mib)
        used[0] += gpu
        used[1] += pod.requests.cpu_milli
        used[2] += pod.requests.memory
        if gpu and pod.gpu_indices:
            share = gpu // len(pod.gpu_indices) if gpu >= UNIT else gpu
            for index in pod.gpu_indices:
                devices[index] = devices.get(index, 0) + share
        if gpu:
            holders.append(f"{pod.namespace}/{pod.name}{' (terminating)' if pod.terminating else ''}")
    own_gpu, per_device = _claim(decision, own_pod, gpu_memory_mib)
    held = ", ".join(sorted(holders)) or "none"
    if own_gpu and used[0] + own_gpu > allocatable.gpu_milli:
        return (
            f"node {decision.node} lacks free GPUs by the binder's view: {used[0] / UNIT:g} of "
            f"{allocatable.gpu_milli / UNIT:g} in use (pods {held}), {own_gpu / UNIT:g} requested"
        )
    for index in decision.gpu_indices:
        if devices.get(index, 0) + per_device > UNIT:
            return (
                f"node {decision.node} GPU {index} is not free by the binder's view: "
                f"{devices[index] / UNIT:g} of it in use (pods {held})"
            )
    if own_pod is not None:
        for name, at, request, total in (
            ("cpu", 1, own_pod.requests.cpu_milli, allocatable.cpu_milli),
            ("memory", 2, own_pod.requests.memory, allocatable.memory),
        ):
            if request and total and used[at] + request > total:
                return f"node {decision.node} lacks free {name} by the binder's view: {used[at]} + {request} > {total}"
    return None
