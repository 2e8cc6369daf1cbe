"""Kubelet admission by capacity (opt-in): a pod whose requests do not fit in what the node's running
pods leave of its allocatable is rejected, phase Failed with reason `OutOf<resource>`, as a real kubelet
does. This is how an over-committing scheduler shows up in end-to-end runs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from kai_stream.core.quantities import parse_quantity

Obj = dict[str, Any]


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """Sum of container requests (limits stand in for missing requests), plus one `pods` slot."""
    total: dict[str, Fraction] = {"pods": Fraction(1)}
    for n, container in enumerate(pod.get("spec", {}).get("containers", [])):
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, qty in merged.items():
            total[name] = total.get(name, Fraction(0)) + parse_quantity(qty, f"spec.containers[{n}].resources.{name}")
    return total


def rejection(pod: Mapping[str, Any], node: Mapping[str, Any], running: Iterable[Mapping[str, Any]]) -> str | None:
    """The resource that does not fit (None when the pod fits)."""
    allocatable = {k: parse_quantity(v, f"node status.allocatable.{k}")
                   for k, v in (node.get("status", {}).get("allocatable") or {}).items()}
    used: dict[str, Fraction] = {}
    for other in running:
        for name, qty in pod_requests(other).items():
            used[name] = used.get(name, Fraction(0)) + qty
    for name, qty in sorted(pod_requests(pod).items()):
        if qty == 0 or (name == "pods" and "pods" not in allocatable):
            continue
        if used.get(name, Fraction(0)) + qty > allocatable.get(name, Fraction(0)):
            return name
    return None


def rejected_status(pod: Obj, resource: str, node: Mapping[str, Any], at: str) -> dict[str, Any]:
    capacity = (node.get("status", {}).get("allocatable") or {}).get(resource, "0")
    return {
        **pod.get("status", {}),
        "phase": "Failed",
        "reason": f"OutOf{resource}",
        "message": f"Pod was rejected: Node didn't have enough resource: {resource}, allocatable: {capacity}",
        "startTime": at,
    }
