"""The binder's DRA half: before a pod is bound, the devices the scheduler allocated to its ResourceClaims
(``BindRequested.dra_devices``, chosen by ``core.dra.allocate``) are written to each claim's status, as kube-scheduler's
DRA plugin does in PreBind: ``status.allocation`` (``devices.results``: request, driver, pool, device; a
``nodeSelector`` on the node's name) and the pod in ``status.reservedFor``, in one status update
(``resource.k8s.io/v1``, with the claim's resourceVersion, so a concurrent writer makes it re-read).

Idempotent: a claim already holding exactly these devices gets only the pod added to ``reservedFor`` (nothing when it
is there), so a re-delivered decision allocates nothing twice. A claim allocated to other devices, reserved for
another pod, or missing refuses the bind (``ClaimWriter.allocate`` returns why; the binder reports ``BindFailed``).

``ClaimWriter.release`` undoes it when the binding is then refused: the pod leaves ``reservedFor`` and, with no
consumer left, the claim loses the decision's allocation.

A claim from a ResourceClaimTemplate is the one the pod's ``status.resourceClaimStatuses`` names. Where no controller
made it yet (the simulated cluster, an API server without kube-controller-manager), it is made here as the
resourceclaim controller would: from the template, owned by the pod, annotated with the pod's claim name, and named
in the pod's status.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import orjson
from kubernetes_asyncio import client

from kai_stream.core.events import BindRequested, DraAllocation

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceclaims"
ANNOTATION_POD_CLAIM = "resource.kubernetes.io/pod-claim-name"
CONFLICT_TRIES = 4

Raw = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[bytes]]
"""``KubeApplier._raw``: one API call with ``_preload_content=False``, retried when transient; the 2xx body."""
ReadPod = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]
StatusOf = Callable[[Mapping[str, Any], BindRequested, list[DraAllocation]], dict[str, Any] | None]
"""``allocated_status`` or ``released_status``: a claim's new status for a decision, None when it has it already."""


class ClaimRefused(Exception):
    """Why a claim cannot take the decision's devices."""


def _status_code(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def results(devices: list[DraAllocation]) -> list[dict[str, str]]:
    return [{"request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device} for d in devices]


def _key(result: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return str(result.get("request")), str(result.get("driver")), str(result.get("pool")), str(result.get("device"))


def _devices_text(found: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{r.get('pool')}/{r.get('device')}" for r in found) or "none"


def by_claim(decision: BindRequested) -> dict[str, list[DraAllocation]]:
    """The decision's devices per claim reference (``spec.resourceClaims[].name``), in the decision's order."""
    out: dict[str, list[DraAllocation]] = {}
    for device in decision.dra_devices:
        out.setdefault(device.claim, []).append(device)
    return out


def allocated_status(
    claim: Mapping[str, Any], decision: BindRequested, devices: list[DraAllocation]
) -> dict[str, Any] | None:
    """The claim's status with the decision's devices allocated and the pod reserved, or None when it already is so.
    Raises ``ClaimRefused`` when the claim holds other devices or is reserved for another pod."""
    meta = claim.get("metadata") or {}
    where = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    status = dict(claim.get("status") or {})
    wanted = results(devices)
    allocation = status.get("allocation")
    if allocation:
        found = list((allocation.get("devices") or {}).get("results") or [])
        if sorted(map(_key, found)) != sorted(map(_key, wanted)):
            raise ClaimRefused(
                f"{where} is already allocated to {_devices_text(found)}, not {_devices_text(wanted)}"
            )
    reserved = list(status.get("reservedFor") or [])
    others = [r for r in reserved if r.get("uid") != decision.uid]
    if others:
        names = ", ".join(f"{r.get('resource')}/{r.get('name')}" for r in others)
        raise ClaimRefused(f"{where} is reserved for {names}")
    if allocation and len(reserved) > len(others):
        return None
    status["allocation"] = allocation or {
        "devices": {"results": wanted},
        "nodeSelector": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [decision.node]}]}
        ]},
    }
    status["reservedFor"] = [{"resource": "pods", "name": decision.name, "uid": decision.uid}]
    return status


def released_status(
    claim: Mapping[str, Any], decision: BindRequested, devices: list[DraAllocation]
) -> dict[str, Any] | None:
    """The claim's status without the decision's pod in ``reservedFor`` (and, with no consumer left, without the
    decision's allocation), or None when there is nothing of the decision's to undo."""
    status = dict(claim.get("status") or {})
    reserved = list(status.get("reservedFor") or [])
    kept = [r for r in reserved if r.get("uid") != decision.uid]
    if len(kept) == len(reserved):
        return None
    if kept:
        status["reservedFor"] = kept
        return status
    status.pop("reservedFor", None)
    found = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    if sorted(map(_key, found)) == sorted(map(_key, results(devices))):
        status.pop("allocation", None)
    return status


class ClaimWriter:
    """Writes a bind's device allocation to the pod's ResourceClaims through one Kubernetes API."""

    def __init__(self, api: client.ApiClient, raw: Raw, read_pod: ReadPod) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.raw = raw
        self.read_pod = read_pod

    async def allocate(self, decision: BindRequested, pod: Mapping[str, Any] | None) -> str | None:
        """None once every claim of the decision holds its devices reserved for the pod; else why not."""
        try:
            for ref, devices in by_claim(decision).items():
                name = devices[0].resource_claim
                if name is None:
                    pod = pod if pod is not None else await self.read_pod(decision.namespace, decision.name)
                    name = await self._template_claim(decision, ref, pod)
                await self._allocate_one(decision, name, devices)
        except ClaimRefused as exc:
            return str(exc)
        return None

    async def _get(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            body = await self.raw("get", lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _preload_content=False))
        except Exception as exc:
            if _status_code(exc) == 404:
                raise ClaimRefused(f"ResourceClaim {namespace}/{name} not found") from None
            raise
        claim: dict[str, Any] = orjson.loads(body)
        return claim

    async def _allocate_one(self, decision: BindRequested, name: str, devices: list[DraAllocation]) -> None:
        if not await self._write_status(decision, name, devices, allocated_status):
            raise ClaimRefused(f"ResourceClaim {decision.namespace}/{name} kept changing ({CONFLICT_TRIES} conflicts)")

    async def release(self, decision: BindRequested) -> None:
        """Give back what ``allocate`` wrote for ``decision`` (its binding was refused); failures are logged."""
        for devices in by_claim(decision).values():
            name = devices[0].resource_claim
            pod = None if name is not None else await self.read_pod(decision.namespace, decision.name)
            if name is None:
                name = next((str(e.get("resourceClaimName")) for e in ((pod or {}).get("status") or {}).get(
                    "resourceClaimStatuses") or [] if e.get("name") == devices[0].claim), None)
            if name is None:
                continue
            try:
                await self._release_one(decision, name, devices)
            except Exception as exc:
                log.warning("could not release ResourceClaim %s/%s: %s", decision.namespace, name, exc)

    async def _release_one(self, decision: BindRequested, name: str, devices: list[DraAllocation]) -> None:
        await self._write_status(decision, name, devices, released_status)

    async def _write_status(
        self, decision: BindRequested, name: str, devices: list[DraAllocation], new_status: StatusOf
    ) -> bool:
        """Write ``new_status`` of claim ``name`` (nothing when it returns None), re-reading the claim on a conflict;
        False when it kept conflicting ``CONFLICT_TRIES`` times."""
        for _ in range(CONFLICT_TRIES):
            claim = await self._get(decision.namespace, name)
            status = new_status(claim, decision, devices)
            if status is None:
                return True
            try:
                await self._put_status(decision.namespace, name, {**claim, "status": status})
                return True
            except Exception as exc:
                if _status_code(exc) != 409:
                    raise
        return False

    async def _put_status(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        await self.raw("claim", lambda: self.custom.replace_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, body, _preload_content=False))

    async def _template_claim(self, decision: BindRequested, ref: str, pod: Mapping[str, Any] | None) -> str:
        """The claim made for the pod's template reference ``ref``; made here when no controller made it yet."""
        where = f"pod {decision.namespace}/{decision.name}"
        if pod is None:
            raise ClaimRefused(f"{where} not found")
        made = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        for entry in made:
            if entry.get("name") == ref and entry.get("resourceClaimName"):
                return str(entry["resourceClaimName"])
        refs = [r for r in (pod.get("spec") or {}).get("resourceClaims") or [] if r.get("name") == ref]
        template = refs[0].get("resourceClaimTemplateName") if refs else None
        if not template:
            raise ClaimRefused(f"{where} has no resourceClaimTemplateName for claim {ref!r}")
        try:
            body = await self.raw("get", lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, decision.namespace, "resourceclaimtemplates", template, _preload_content=False))
        except Exception as exc:
            if _status_code(exc) == 404:
                raise ClaimRefused(f"ResourceClaimTemplate {decision.namespace}/{template} not found") from None
            raise
        spec = (orjson.loads(body).get("spec") or {}).get("spec") or {}
        name = f"{decision.name}-{ref}"[:253]
        claim = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
            "metadata": {
                "name": name, "namespace": decision.namespace, "annotations": {ANNOTATION_POD_CLAIM: ref},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": decision.name, "uid": decision.uid,
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": spec,
        }
        try:
            await self.raw("claim", lambda: self.custom.create_namespaced_custom_object(
                GROUP, VERSION, decision.namespace, PLURAL, claim, _preload_content=False))
        except Exception as exc:
            if _status_code(exc) != 409:
                raise
            existing = await self._get(decision.namespace, name)
            owners = (existing.get("metadata") or {}).get("ownerReferences") or []
            if not any(o.get("uid") == decision.uid for o in owners):
                raise ClaimRefused(f"ResourceClaim {decision.namespace}/{name} exists and is not {where}'s") from None
        statuses = [*(e for e in made if e.get("name") != ref), {"name": ref, "resourceClaimName": name}]
        await self.raw("status", lambda: self.core.patch_namespaced_pod_status(
            decision.name, decision.namespace, {"status": {"resourceClaimStatuses": statuses}},
            _preload_content=False))
        return name
