"""``gpu-fraction-num-devices``: a fraction on each of several GPUs of one node, charged fraction x devices."""

from __future__ import annotations

from typing import Any

import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.manifests import ManifestError, load_scenario
from kai_stream.simulate import simulate

NODE = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {nvidia.com/gpu: "2", cpu: "16", memory: 64Gi}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: qa}
spec: {resources: {gpu: {quota: 2, limit: -1}, cpu: {quota: -1}, memory: {quota: -1}}}
"""


def _pod(name: str, fraction: str, devices: str | None, second: int) -> str:
    extra = f', gpu-fraction-num-devices: "{devices}"' if devices else ""
    return f"""
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  creationTimestamp: "2026-01-01T00:00:{second:02d}Z"
  labels: {{kai.scheduler/queue: qa}}
  annotations: {{gpu-fraction: "{fraction}"{extra}}}
spec:
  schedulerName: kai-scheduler
  priorityClassName: train
  containers: [{{name: c, resources: {{limits: {{cpu: "1"}}}}}}]
"""


def _run(text: str) -> dict[str, Any]:
    result = simulate(load_scenario(text), SchedulerConfig(), cycles=10)
    assert result.settled
    return result.to_json()


def test_half_on_two_devices_takes_half_of_each_gpu_and_charges_one() -> None:
    out = _run(NODE + _pod("split", "0.5", "2", 1))
    assert out["pods"]["ml/split"]["status"] == "Running"
    assert out["pods"]["ml/split"]["gpu_indices"] == [0, 1]
    assert out["queues"]["qa"]["allocated"]["gpu"] == 1.0


def test_the_other_halves_stay_free_for_other_fractions() -> None:
    out = _run(NODE + _pod("split", "0.5", "2", 1) + _pod("a", "0.5", None, 2) + _pod("b", "0.5", None, 3))
    assert [out["pods"][f"ml/{k}"]["status"] for k in ("split", "a", "b")] == ["Running"] * 3
    assert sorted(out["pods"]["ml/a"]["gpu_indices"] + out["pods"]["ml/b"]["gpu_indices"]) == [0, 1]
    assert out["queues"]["qa"]["allocated"]["gpu"] == 2.0


def test_more_devices_than_the_node_has_stays_pending() -> None:
    out = _run(NODE + _pod("wide", "0.5", "3", 1))
    assert out["pods"]["ml/wide"]["status"] == "Pending"
    assert out["queues"]["qa"]["allocated"]["gpu"] == 0.0


def test_num_devices_needs_a_fraction() -> None:
    bad = _pod("x", "0.5", "2", 1).replace('gpu-fraction: "0.5", ', "")
    with pytest.raises(ManifestError):
        load_scenario(NODE + bad)
