"""PodGroup v2alpha2 ``subGroups``: each subgroup runs at least its minMember pods or none of the job starts."""

from __future__ import annotations

import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.manifests import ManifestError, load_scenario
from kai_stream.simulate import simulate

BASE = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {nvidia.com/gpu: "GPUS", cpu: "16", memory: 64Gi}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: qa}
spec: {resources: {gpu: {quota: -1, limit: -1}, cpu: {quota: -1}, memory: {quota: -1}}}
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: pg, namespace: ml, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  minMember: 3
  queue: qa
  subGroups: [{name: workers, minMember: 2}, {name: leader, minMember: 1}]
"""


def _pod(name: str, sub_group: str, second: int) -> str:
    return f"""
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  creationTimestamp: "2026-01-01T00:00:{second:02d}Z"
  labels: {{kai.scheduler/subgroup-name: {sub_group}}}
  annotations: {{pod-group-name: pg}}
spec:
  schedulerName: kai-scheduler
  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]
"""


def _statuses(gpus: int, pods: list[tuple[str, str]]) -> dict[str, str]:
    text = BASE.replace("GPUS", str(gpus)) + "".join(_pod(n, g, i) for i, (n, g) in enumerate(pods, 1))
    result = simulate(load_scenario(text), SchedulerConfig(), cycles=10)
    assert result.settled
    return {k.split("/")[1]: v["status"] for k, v in result.to_json()["pods"].items()}


def test_every_subgroup_reaches_its_minimum_before_extra_pods() -> None:
    """4 GPUs: both workers and the leader start first; one extra worker takes the last GPU."""
    got = _statuses(4, [("w0", "workers"), ("w1", "workers"), ("w2", "workers"), ("w3", "workers"), ("l0", "leader")])
    assert got["l0"] == "Running" and got["w0"] == got["w1"] == "Running"
    assert sorted(got.values()).count("Running") == 4


def test_a_subgroup_below_its_minimum_keeps_the_whole_job_pending() -> None:
    """Three pods fit the job's minMember 3, but subgroup workers (minMember 2) has one pod: nothing starts."""
    got = _statuses(4, [("w0", "workers"), ("l0", "leader"), ("l1", "leader")])
    assert set(got.values()) == {"Pending"}


def test_sub_group_min_member_must_be_positive() -> None:
    text = BASE.replace("GPUS", "1").replace("{name: leader, minMember: 1}", "{name: leader, minMember: 0}")
    with pytest.raises(ManifestError):
        load_scenario(text)
