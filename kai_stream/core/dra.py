"""Dynamic Resource Allocation (``resource.k8s.io``), count-only: how many GPUs a pod's ResourceClaims ask for and
how many GPU devices a node's ResourceSlices publish.

``DraIndex`` holds the DRA objects seen (DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice) and which
pods reference each ResourceClaim by name. From it, ``pod_gpus`` answers a pod's GPU count, or why it cannot be
scheduled here, and ``node_gpus`` a node's published GPU devices. The manifests layer folds these into the events
(``manifests.object_to_events(dra=…)``): a node's DRA GPUs are added to its GPU count and labelled
``LABEL_DRA_GPUS``; a pod's claimed GPUs are added to its request, with a required node affinity on that label, so
it is never placed on a node without published devices; a pod of device-plugin GPUs gets the opposite affinity once
any node publishes GPU devices (a DRA node's GPUs are not the device plugin's); a pod that cannot be served carries
``PodSpec.refused`` and stays pending with code ``ResourceClaimUnusable``.

A device class is a GPU class when its CEL selectors name the GPU driver (``device.driver == "gpu.nvidia.com"``) or
when it is named after it. Supported: claims by name (one pod per claim) or from a template, requests for
``ExactCount`` devices of a GPU class. Refused with the reason: device attribute selectors and claim constraints
(placement by attributes is not modelled), ``All`` allocation mode, admin access, prioritized lists
(``firstAvailable``), classes that are not GPU classes, and a claim shared by several pods. Devices are counted,
not allocated: the claim's ``status.allocation`` is not written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["API_VERSIONS", "DRA_KINDS", "GPU_DRIVER", "LABEL_DRA_GPUS", "NAMESPACED", "DraIndex", "object_key"]

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
            for ref in _items((pod.get("spec") or {}).get("resourceClaims"))
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

    def node_gpus(self, node: str) -> int:
        """GPU devices the ResourceSlices of ``node`` publish for the GPU driver."""
        total = 0
        for (kind, _, _), obj in sorted(self.objects.items()):
            spec = obj.get("spec") or {}
            if kind == "ResourceSlice" and spec.get("nodeName") == node and spec.get("driver") == GPU_DRIVER:
                total += len(_items(spec.get("devices")))
        return total

    def pod_gpus(self, pod: Obj) -> tuple[int, str | None]:
        """(GPUs the pod's claims ask for, None) or (0, why it cannot be scheduled by counting)."""
        spec = pod.get("spec") or {}
        namespace = str(_meta(pod).get("namespace") or "default")
        total = 0
        for i, ref in enumerate(_items(spec.get("resourceClaims"))):
            where = f"spec.resourceClaims[{i}] ({ref.get('name')})"
            if ref.get("resourceClaimName"):
                name = str(ref["resourceClaimName"])
                claim = self.objects.get(("ResourceClaim", namespace, name))
                if claim is None:
                    return 0, f"{where}: ResourceClaim {namespace}/{name} not observed"
                users = self.claim_users.get((namespace, name), set())
                if len(users) > 1:
                    return 0, (f"{where}: ResourceClaim {namespace}/{name} is shared by {len(users)} pods "
                               f"({', '.join(sorted(users))}); shared claims are not supported")
                claim_spec = claim.get("spec") or {}
            elif ref.get("resourceClaimTemplateName"):
                name = str(ref["resourceClaimTemplateName"])
                template = self.objects.get(("ResourceClaimTemplate", namespace, name))
                if template is None:
                    return 0, f"{where}: ResourceClaimTemplate {namespace}/{name} not observed"
                claim_spec = ((template.get("spec") or {}).get("spec")) or {}
            else:
                return 0, f"{where}: names neither a resourceClaimName nor a resourceClaimTemplateName"
            gpus, refused = self._claim_gpus(claim_spec, where)
            if refused is not None:
                return 0, refused
            total += gpus
        return total, None

    def _claim_gpus(self, claim_spec: Mapping[str, Any], where: str) -> tuple[int, str | None]:
        devices = claim_spec.get("devices") or {}
        if _items(devices.get("constraints")):
            return 0, f"{where}: device constraints (matchAttribute) are not supported (DRA is count-only here)"
        total = 0
        for request in _items(devices.get("requests")):
            name = request.get("name")
            if request.get("firstAvailable"):
                return 0, f"{where}: request {name}: prioritized lists (firstAvailable) are not supported"
            nested = request.get("exactly")
            exact: Mapping[str, Any] = nested if isinstance(nested, Mapping) else request
            if _items(exact.get("selectors")):
                return 0, (f"{where}: request {name}: selectors on device attributes are not supported "
                           f"(DRA is count-only here)")
            if exact.get("adminAccess"):
                return 0, f"{where}: request {name}: admin access is not supported"
            mode = exact.get("allocationMode") or "ExactCount"
            if mode != "ExactCount":
                return 0, f"{where}: request {name}: allocationMode {mode} is not supported (ExactCount only)"
            cls = str(exact.get("deviceClassName") or "")
            gpu = self.is_gpu_class(cls)
            if gpu is None:
                return 0, f"{where}: request {name}: DeviceClass {cls!r} not observed"
            if not gpu:
                return 0, f"{where}: request {name}: DeviceClass {cls!r} is not a GPU class ({GPU_DRIVER})"
            count = exact.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                return 0, f"{where}: request {name}: count must be a whole number >= 1, got {count!r}"
            total += count
        return total, None
