"""Kind-specific apiserver rules: defaults on create, what a main-resource write versus a `/status` write
may change, pod spec immutability, and which deletions are graceful.

`INTERNAL` is the pseudo-subresource used by the simulator's own writers (bindings, kubelets), which
may change anything, as the apiserver's own registry code can.
"""

from __future__ import annotations

import copy
from typing import Any

from kai_stream.connectors.simcluster.errors import ApiError
from kai_stream.connectors.simcluster.resources import ResourceType

Obj = dict[str, Any]
INTERNAL = "*"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_POD_MUTABLE_SPEC = ("activeDeadlineSeconds", "tolerations", "schedulingGates")


def prepare_create(rt: ResourceType, obj: Obj, *, loaded: bool) -> None:
    """Defaults applied by the apiserver on create. `loaded` objects (from a scenario) keep their status."""
    if rt.key == "pods":
        _default_pod(obj, loaded=loaded)
    elif rt.key == "nodes":
        _default_node(obj)
    elif rt.key == "namespaces":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    elif rt.has_status and not loaded:
        obj.pop("status", None)


def _default_pod(pod: Obj, *, loaded: bool) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        if limits:
            requests = resources.setdefault("requests", {})
            for name, qty in limits.items():
                requests.setdefault(name, qty)
            container["resources"] = resources
    if not loaded or not pod.get("status", {}).get("phase"):
        pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}


def _qos_class(spec: Obj) -> str:
    containers = spec.get("containers", [])
    requests = [c.get("resources", {}).get("requests", {}) for c in containers]
    limits = [c.get("resources", {}).get("limits", {}) for c in containers]
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(
        lim.get("cpu") and lim.get("memory") and req == lim for req, lim in zip(requests, limits, strict=True)
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _default_node(node: Obj) -> None:
    status = node.setdefault("status", {})
    if "capacity" in status and "allocatable" not in status:
        status["allocatable"] = dict(status["capacity"])
    if "allocatable" in status and "capacity" not in status:
        status["capacity"] = dict(status["allocatable"])
    conditions = status.setdefault("conditions", [])
    if not any(c.get("type") == "Ready" for c in conditions):
        conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                           "message": "simulated kubelet is posting ready status"})
    name = node.get("metadata", {}).get("name", "")
    status.setdefault("nodeInfo", {
        "architecture": "amd64",
        "bootID": f"sim-{name}",
        "containerRuntimeVersion": "sim://1.0",
        "kernelVersion": "6.8.0-sim",
        "kubeProxyVersion": "v1.31.0-kai-stream-sim",
        "kubeletVersion": "v1.31.0-kai-stream-sim",
        "machineID": f"sim-{name}",
        "operatingSystem": "linux",
        "osImage": "kai-stream simulated node",
        "systemUUID": f"sim-{name}",
    })


def prepare_update(rt: ResourceType, old: Obj, new: Obj, subresource: str) -> Obj:
    """Apply the split between the main resource and `/status`; raise 422 for forbidden pod spec changes."""
    if subresource == INTERNAL:
        return new
    if rt.has_status:
        if subresource == "status":
            result = copy.deepcopy(old)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            return result
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)
    if rt.key == "pods":
        _check_pod_spec(old, new)
    elif old.get("spec") != new.get("spec"):
        new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
    return new


def _spec_fixed_part(spec: Obj) -> Obj:
    fixed = {k: v for k, v in spec.items() if k not in _POD_MUTABLE_SPEC}
    for key in ("containers", "initContainers"):
        if key in fixed:
            fixed[key] = [{k: v for k, v in c.items() if k != "image"} for c in fixed[key]]
    return fixed


def _check_pod_spec(old: Obj, new: Obj) -> None:
    if _spec_fixed_part(old.get("spec", {})) != _spec_fixed_part(new.get("spec", {})):
        name = old["metadata"]["name"]
        raise ApiError(
            422,
            f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change fields other than '
            "`spec.containers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
            "existing tolerations) or `spec.schedulingGates` (use the binding subresource to set spec.nodeName)",
            name=name,
            kind="pods",
        )


def graceful(rt: ResourceType, obj: Obj) -> bool:
    """Only a pod that sits on a node and has not finished is terminated gracefully."""
    if rt.key != "pods":
        return False
    return bool(obj.get("spec", {}).get("nodeName")) and obj.get("status", {}).get("phase") not in TERMINAL_PHASES
