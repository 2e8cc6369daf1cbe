"""Manifest builders shared by the simulated-cluster contract tests."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

NODE_GPU = {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"}


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "status": {"capacity": dict(NODE_GPU)}}


def pod(name: str, namespace: str = "default", *, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, node_name: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler",
                            "containers": [{"name": "main", "image": "busybox",
                                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": spec}


def binding(name: str, node_name: str) -> client.V1Binding:
    return client.V1Binding(metadata=client.V1ObjectMeta(name=name),
                            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node_name))
