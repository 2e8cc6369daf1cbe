"""Dynamic Resource Allocation (``resource.k8s.io``): how many GPUs a pod's ResourceClaims ask for, which GPU devices a
node's ResourceSlices publish, and which of them a bind allocates to the claims.

``DraIndex`` holds the DRA objects seen (DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice) and which
pods reference each ResourceClaim by name. From it, ``pod_requests`` answers a pod's claim requests, or why it cannot
be scheduled here, and ``node_devices`` a node's published GPU devices. The manifests layer folds these into the
events (``manifests.object_to_events(dra=…)``): a node's DRA GPUs are its first GPU indices (``NodeSpec.dra_devices``,
added to its GPU count and labelled ``LABEL_DRA_GPUS``); a pod's claimed GPUs are added to its request
(``PodSpec.dra_requests`` says which), with a required node affinity on that label, so it is never placed on a node
without published devices; a bound pod's claims already allocated (``status.allocation``) give its GPU indices
(``allocated_indices``), so those devices are counted as taken; a pod of device-plugin GPUs gets the opposite
affinity once any node publishes GPU devices (a DRA node's GPUs are not the device plugin's); a pod that cannot be
served carries ``PodSpec.refused`` and stays pending with code ``ResourceClaimUnusable``. Devices allocated to a
claim no observed pod names (by name, or as its template-made claim in ``status.resourceClaimStatuses``) are held
elsewhere: they are left out of the node's devices, so the core never gives them again.

A device class is a GPU class when its CEL selectors name the GPU driver (``device.driver == "gpu.nvidia.com"``) or
when it is named after it. Supported: claims by name (one pod per claim) or from a template, requests for
``ExactCount`` devices of a GPU class. Refused with the reason: device attribute selectors and claim constraints
(placement by attributes is not modelled), ``All`` allocation mode, admin access, prioritized lists
(``firstAvailable``), classes that are not GPU classes, and a claim shared by several pods.

Allocation (``allocate``, pure): the core picks the pod's GPU indices on the node as for any whole-GPU pod (so no
index, hence no device, is given twice); index ``i`` is the node's ``dra_devices[i]``, handed to the pod's claim
requests in order. The binder writes the result to the claims (``binder.dra``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kai_stream.core.events import DraAllocation, DraDevice, DraRequest, NodeSpec, PodSpec

__all__ = [
    "API_VERSIONS",
    "DRA_KINDS",
    "GPU_DRIVER",
    "LABEL_DRA_GPUS",
    "NAMESPACED",
    "DraIndex",
    "allocate",
    "claim_name",
    "object_key",
]

GPU_DRIVER = "gpu.nvidia.com"
LABEL_DRA_GPUS = "dra.kai-stream.io/gpu-devices"
API_VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1")
DRA_KINDS = ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")
NAMESPACED = ("ResourceClaim", "ResourceClaimTemplate")

Obj = Mapping[str, Any]


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _items(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def object_key(obj: Obj) -> tuple[str, str, str]:
    kind = str(obj.get("kind", ""))
    meta = _meta(obj)
    namespace = str(meta.get("namespace") or "default") if kind in NAMESPACED else ""
    return kind, namespace, str(meta.get("name", ""))


class DraIndex:
    """The DRA objects by (kind, namespace, name), and the pods (``namespace/name``) naming each claim."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.claim_users: dict[tuple[str, str], set[str]] = {}

    def upsert(self, obj: Obj) -> None:
        self.objects[object_key(obj)] = obj

    def remove(self, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, namespace if kind in NAMESPACED else "", name), None)

    def pod_seen(self, pod: Obj, present: bool = True) -> bool:
        """Record which claims ``pod`` names (``present`` False: it is gone); True when that changed the users
        of a claim (the pods naming it then need translating again)."""
        meta = _meta(pod)
        namespace = str(meta.get("namespace") or "default")
        key = f"{namespace}/{meta.get('name')}"
        wanted = {
            (namespace, str(ref["resourceClaimName"]))
            for ref in [
                *_items((pod.get("spec") or {}).get("resourceClaims")),
                *_items((pod.get("status") or {}).get("resourceClaimStatuses")),
            ]
            if ref.get("resourceClaimName")
        } if present else set()
        changed = False
        for claim, users in list(self.claim_users.items()):
            if key in users and claim not in wanted:
                users.discard(key)
                changed = True
                if not users:
                    del self.claim_users[claim]
        for claim in sorted(wanted):
            users = self.claim_users.setdefault(claim, set())
            if key not in users:
                users.add(key)
                changed = True
        return changed

    def is_gpu_class(self, name: str) -> bool | None:
        """Whether DeviceClass ``name`` selects GPUs (None: no such class seen)."""
        cls = self.objects.get(("DeviceClass", "", name))
        if cls is None:
            return None
        if name == GPU_DRIVER:
            return True
        for selector in _items((cls.get("spec") or {}).get("selectors")):
            expression = str((selector.get("cel") or {}).get("expression", ""))
            if GPU_DRIVER in expression and "driver" in expression:
                return True
        return False

    def has_gpu_slices(self) -> bool:
        """Whether some node publishes GPU devices (then device-plugin GPU pods keep off such nodes)."""
        return any(
            kind == "ResourceSlice" and (obj.get("spec") or {}).get("driver") == GPU_DRIVER
            for (kind, _, _), obj in self.objects.items()
        )

    def held_elsewhere(self) -> set[tuple[str, str, str]]:
        """(driver, pool, device) of the devices allocated (``status.allocation``) to claims no observed pod names
        (a claim another scheduler allocated, or whose pod is not seen): taken, though no bound pod counts them."""
        held: set[tuple[str, str, str]] = set()
        for (kind, namespace, name), obj in self.objects.items():
            if kind != "ResourceClaim" or self.claim_users.get((namespace, name)):
                continue
            allocation = (obj.get("status") or {}).get("allocation")
            if isinstance(allocation, Mapping):
                for result in _items((allocation.get("devices") or {}).get("results")):
                    held.add((str(result.get("driver")), str(result.get("pool")), str(result.get("device"))))
        return held

    def node_devices(self, node: str) -> tuple[DraDevice, ...]:
        """The GPU devices the ResourceSlices of ``node`` publish for the GPU driver and no unseen pod's claim holds
        (``held_elsewhere``): slices by (pool, name), each slice's devices in its order."""
        slices = []
        for (kind, _, name), obj in self.objects.items():
            spec = obj.get("spec") or {}
            if kind == "ResourceSlice" and spec.get("nodeName") == node and spec.get("driver") == GPU_DRIVER:
                pool = str((spec.get("pool") or {}).get("name") or node)
                slices.append((pool, name, spec))
        held = self.held_elsewhere()
        published = (
            DraDevice(driver=GPU_DRIVER, pool=pool, device=str(device.get("name", "")))
            for pool, _, spec in sorted(slices, key=lambda s: (s[0], s[1]))
            for device in _items(spec.get("devices"))
        )
        return tuple(d for d in published if (d.driver, d.pool, d.device) not in held)

    def node_gpus(self, node: str) -> int:
        """GPU devices the ResourceSlices of ``node`` publish for the GPU driver."""
        return len(self.node_devices(node))

    def pod_gpus(self, pod: Obj) -> tuple[int, str | None]:
        """(GPUs the pod's claims ask for, None) or (0, why it cannot be scheduled)."""
        requests, refused = self.pod_requests(pod)
        return sum(r.count for r in requests), refused

    def pod_requests(self, pod: Obj) -> tuple[tuple[DraRequest, ...], str | None]:
        """(The pod's claim requests, in its order, None) or ((), why it cannot be scheduled)."""
        spec = pod.get("spec") or {}
        namespace = str(_meta(pod).get("namespace") or "default")
        out: list[DraRequest] = []
        for i, ref in enumerate(_items(spec.get("resourceClaims"))):
            where = f"spec.resourceClaims[{i}] ({ref.get('name')})"
            resource_claim: str | None = None
            if ref.get("resourceClaimName"):
                name = resource_claim = str(ref["resourceClaimName"])
                claim = self.objects.get(("ResourceClaim", namespace, name))
                if claim is None:
                    return (), f"{where}: ResourceClaim {namespace}/{name} not observed"
                users = self.claim_users.get((namespace, name), set())
                if len(users) > 1:
                    return (), (f"{where}: ResourceClaim {namespace}/{name} is shared by {len(users)} pods "
                                f"({', '.join(sorted(users))}); shared claims are not supported")
                claim_spec = claim.get("spec") or {}
            elif ref.get("resourceClaimTemplateName"):
                name = str(ref["resourceClaimTemplateName"])
                template = self.objects.get(("ResourceClaimTemplate", namespace, name))
                if template is None:
                    return (), f"{where}: ResourceClaimTemplate {namespace}/{name} not observed"
                claim_spec = ((template.get("spec") or {}).get("spec")) or {}
            else:
                return (), f"{where}: names neither a resourceClaimName nor a resourceClaimTemplateName"
            counts, refused = self._claim_gpus(claim_spec, where)
            if refused is not None:
                return (), refused
            out.extend(
                DraRequest(claim=str(ref.get("name", "")), resource_claim=resource_claim, request=request, count=n)
                for request, n in counts
            )
        return tuple(out), None

    def allocated_indices(self, pod: Obj, requests: Sequence[DraRequest], node: str) -> tuple[int, ...] | None:
        """The GPU indices on ``node`` of the devices the pod's claims are allocated (``status.allocation``), or None
        when some claim is not allocated or names a device the node does not publish."""
        devices = {(d.driver, d.pool, d.device): i for i, d in enumerate(self.node_devices(node))}
        namespace = str(_meta(pod).get("namespace") or "default")
        indices: list[int] = []
        for claim in sorted({claim_name(pod, r) or "" for r in requests}):
            obj = self.objects.get(("ResourceClaim", namespace, claim))
            allocation = ((obj or {}).get("status") or {}).get("allocation")
            if not isinstance(allocation, Mapping):
                return None
            for result in _items((allocation.get("devices") or {}).get("results")):
                index = devices.get((str(result.get("driver")), str(result.get("pool")), str(result.get("device"))))
                if index is None:
                    return None
                indices.append(index)
        return tuple(sorted(indices))

    def _claim_gpus(self, claim_spec: Mapping[str, Any], where: str) -> tuple[list[tuple[str, int]], str | None]:
        devices = claim_spec.get("devices") or {}
        if _items(devices.get("constraints")):
            return [], f"{where}: device constraints (matchAttribute) are not supported (placement by attributes " \
                "is not modelled)"
        counts: list[tuple[str, int]] = []
        for request in _items(devices.get("requests")):
            name = request.get("name")
            if request.get("firstAvailable"):
                return [], f"{where}: request {name}: prioritized lists (firstAvailable) are not supported"
            nested = request.get("exactly")
            exact: Mapping[str, Any] = nested if isinstance(nested, Mapping) else request
            if _items(exact.get("selectors")):
                return [], (f"{where}: request {name}: selectors on device attributes are not supported "
                            f"(placement by attributes is not modelled)")
            if exact.get("adminAccess"):
                return [], f"{where}: request {name}: admin access is not supported"
            mode = exact.get("allocationMode") or "ExactCount"
            if mode != "ExactCount":
                return [], f"{where}: request {name}: allocationMode {mode} is not supported (ExactCount only)"
            cls = str(exact.get("deviceClassName") or "")
            gpu = self.is_gpu_class(cls)
            if gpu is None:
                return [], f"{where}: request {name}: DeviceClass {cls!r} not observed"
            if not gpu:
                return [], f"{where}: request {name}: DeviceClass {cls!r} is not a GPU class ({GPU_DRIVER})"
            count = exact.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1024:
                return [], f"{where}: request {name}: count must be a whole number in [1, 1024], got {count!r}"
            counts.append((str(name), count))
        return counts, None


def claim_name(pod: Obj, request: DraRequest) -> str | None:
    """The ResourceClaim serving ``request`` of ``pod``: named by the pod, or made from a template and named in the
    pod's ``status.resourceClaimStatuses`` (None until the claim is made)."""
    if request.resource_claim is not None:
        return request.resource_claim
    for status in _items((pod.get("status") or {}).get("resourceClaimStatuses")):
        if status.get("name") == request.claim and status.get("resourceClaimName"):
            return str(status["resourceClaimName"])
    return None


def allocate(pod: PodSpec, node: NodeSpec, gpu_indices: Sequence[int]) -> tuple[DraAllocation, ...]:
    """The node's devices for the pod's claim requests: ``gpu_indices`` (the core's choice of the node's GPUs) in
    ascending order, index ``i`` being ``node.dra_devices[i]``, handed to the requests in order. Empty when the pod
    has no claim requests, or when an index is not a published device (a device-plugin GPU of the node): the
    binder then refuses the bind rather than leave a claim short."""
    indices = sorted(gpu_indices)
    if not pod.dra_requests or any(i >= len(node.dra_devices) for i in indices):
        return ()
    if len(indices) != sum(r.count for r in pod.dra_requests):
        return ()
    out: list[DraAllocation] = []
    taken = iter(indices)
    for request in pod.dra_requests:
        for _ in range(request.count):
            device = node.dra_devices[next(taken)]
            out.append(DraAllocation(
                claim=request.claim, resource_claim=request.resource_claim, request=request.request,
                driver=device.driver, pool=device.pool, device=device.device,
            ))
    return tuple(out)
