"""What the pipeline and scenario tests put in a cluster: an unlimited queue (YAML), a GPU pod (the API body the
simulated cluster takes), and waiting on a running pipeline until something holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client

from kai_stream.pipeline import Pipeline
from tests.kube_calls import send


def gpu_nodes(count: int, gpus: int) -> str:
    """``count`` nodes ``node-<i>`` of ``gpus`` GPUs (64 CPUs, 256 GiB), as YAML documents each opened by ``---``."""
    return "".join(
        f"""---
apiVersion: v1
kind: Node
metadata: {{name: node-{n}}}
status: {{allocatable: {{nvidia.com/gpu: "{gpus}", cpu: "64", memory: 256Gi}}}}
"""
        for n in range(count)
    )


def unlimited_queue(name: str = "default-queue") -> str:
    """A KAI queue with no quota and no limit, as one YAML document."""
    return f"""apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {name}}}
spec:
  resources:
    gpu: {{quota: -1, overQuotaWeight: 1, limit: -1}}
    cpu: {{quota: -1, overQuotaWeight: 1, limit: -1}}
    memory: {{quota: -1, overQuotaWeight: 1, limit: -1}}
"""


async def create_pod(core: client.CoreV1Api, namespace: str, body: dict[str, Any]) -> Any:
    """Creates a pod from a dict body: the client sends dicts as they are, its annotations name only ``V1Pod``."""
    return await send(core.create_namespaced_pod, namespace, body)


def gpu_pod(
    name: str, namespace: str, gpus: int, *, queue: str = "default-queue", cpu: str | None = None
) -> dict[str, Any]:
    """A pod for kai-scheduler in ``queue`` asking ``gpus`` whole GPUs (and ``cpu`` cores when given)."""
    limits = {"nvidia.com/gpu": str(gpus)} | ({"cpu": cpu} if cpu is not None else {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kai.scheduler/queue": queue}},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}],
        },
    }


async def until(
    predicate: Callable[[], bool], what: str, pipeline: Pipeline, timeout: float, poll_s: float = 0.1
) -> float:
    """Wait until ``predicate`` holds, failing on a pipeline failure or after ``timeout`` s; the seconds waited."""
    started = time.monotonic()
    while not predicate():
        failure = pipeline.failed()
        assert failure is None, failure
        assert time.monotonic() - started < timeout, f"timed out waiting for {what}\n{pipeline.processor_output()}"
        await asyncio.sleep(poll_s)
    return time.monotonic() - started
