"""Manifests the replay tests share (what-if, explain): a 4-GPU node, a queue with a GPU quota, a one-GPU pod
(with a duration when given)."""

from __future__ import annotations

NODE = """
apiVersion: v1
kind: Node
metadata: {name: node-1}
status: {allocatable: {nvidia.com/gpu: "4", cpu: "32", memory: 128Gi}}
"""


def queue(name: str, gpu_quota: int) -> str:
    return f"""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {name}}}
spec:
  resources:
    gpu: {{quota: {gpu_quota}, overQuotaWeight: 1, limit: -1}}
    cpu: {{quota: -1, overQuotaWeight: 1, limit: -1}}
    memory: {{quota: -1, overQuotaWeight: 1, limit: -1}}
"""


def pod(name: str, queue: str, seconds: int | None = None, priority_class: str = "train") -> str:
    duration = f'\n  annotations: {{kai.scheduler/duration-seconds: "{seconds}"}}' if seconds is not None else ""
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  labels: {{kai.scheduler/queue: {queue}}}{duration}
spec:
  schedulerName: kai-scheduler
  priorityClassName: {priority_class}
  containers:
    - name: main
      resources: {{limits: {{nvidia.com/gpu: "1", cpu: "1", memory: 1Gi}}}}
"""
