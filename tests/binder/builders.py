"""Manifest and decision builders for the binder tests."""

from __future__ import annotations

from typing import Any

from kai_stream.core.events import BindRequested, EvictionRequested, PodPending, stable_id


def node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kai.scheduler/node-pool": "default"}},
        "status": {"capacity": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}},
    }


def pod(name: str, *, group: str | None = None, namespace: str = "team-a") -> dict[str, Any]:
    annotations = {"pod-group-name": group} if group else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations,
                     "labels": {"kai.scheduler/queue": "q"}},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


def pod_group(name: str, namespace: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": 1, "queue": "q"},
    }


def _common(p: dict[str, Any], kind: str, offset: int, pool: str = "default") -> dict[str, Any]:
    meta = p["metadata"]
    return {
        "pool": pool,
        "decision_id": stable_id("default", str(offset), meta["uid"], kind),
        "ts": 1_700_000_000.0 + offset,
        "input_offset": offset,
        "config_hash": "c",
        "code_version": "test",
        "action": "allocate",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
        "job": f"{meta['namespace']}/{meta['name']}",
        "queue": "q",
    }


def bind(
    p: dict[str, Any], node_name: str, offset: int = 1, gpus: tuple[int, ...] = (), pool: str = "default"
) -> BindRequested:
    return BindRequested(**_common(p, "BindRequested", offset, pool), node=node_name, gpu_indices=gpus)


def evict(p: dict[str, Any], offset: int = 2) -> EvictionRequested:
    return EvictionRequested(**_common(p, "EvictionRequested", offset) | {"action": "preempt"})


def pending(p: dict[str, Any], reason: str, offset: int = 1) -> PodPending:
    return PodPending(**_common(p, "PodPending", offset), code="NoNodeFits", reason=reason,
                      predicates={"InsufficientGPU": 2})
