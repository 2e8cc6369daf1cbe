"""From NVML reading to scheduling decision: a GPU the agent reports unhealthy takes no new work, and a pod that
needs it stays pending with the code "Unhealthy" (the pure core, fed the agent's own event)."""

from __future__ import annotations

import pynvml

from kai_stream.connectors.nvml import AgentConfig, GpuAgent, GpuReader, XidEvent
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import GpuHealthObserved, ObservedEvent, PodPending
from kai_stream.core.manifests import load_scenario
from kai_stream.simulate import simulate
from tests.cluster_objects import unlimited_queue

from .recorded import Gpu, RecordedNvml, nvml_error

NODE_AND_QUEUE = """
apiVersion: v1
kind: Node
metadata: {name: gpu-node-1}
status:
  allocatable: {nvidia.com/gpu: "2", cpu: "16", memory: 64Gi}
---
""" + unlimited_queue()
NEEDS_TWO = """
apiVersion: v1
kind: Pod
metadata: {name: needs-two, namespace: default, uid: uid-two, labels: {kai.scheduler/queue: default-queue}}
spec:
  schedulerName: kai-scheduler
  containers:
    - name: main
      resources: {limits: {nvidia.com/gpu: "2"}}
"""
NEEDS_ONE = """
apiVersion: v1
kind: Pod
metadata: {name: needs-one, namespace: default, uid: uid-one, labels: {kai.scheduler/queue: default-queue}}
spec:
  schedulerName: kai-scheduler
  containers:
    - name: main
      resources: {limits: {nvidia.com/gpu: "1"}}
"""


def _scenario(pods: str) -> list[ObservedEvent]:
    return load_scenario(NODE_AND_QUEUE + "---" + pods)


async def _agent_reading(api: RecordedNvml) -> GpuHealthObserved:
    reader = GpuReader(api)
    reader.open()
    reader.wait_xids(0)
    sent: list[GpuHealthObserved] = []

    async def sink(event: GpuHealthObserved) -> None:
        sent.append(event)

    await GpuAgent(reader, AgentConfig(node="gpu-node-1"), sink, clock=lambda: 1.0).poll_once()
    return sent[0]


async def test_fatal_xid_gpu_leaves_the_pool_and_the_pending_reason_says_unhealthy() -> None:
    api = RecordedNvml([Gpu(uuid="GPU-0"), Gpu(uuid="GPU-1")])
    api.xids.append(XidEvent("GPU-1", 79))
    reading = await _agent_reading(api)
    assert [g.healthy for g in reading.gpus] == [True, False]

    result = simulate([*_scenario(NEEDS_TWO), reading], SchedulerConfig())
    assert result.pods()["default/needs-two"]["status"] == "Pending"
    (pending,) = [d for d in result.decisions if isinstance(d, PodPending)]
    assert pending.name == "needs-two"
    assert pending.code == "Unhealthy"

    one = simulate([*_scenario(NEEDS_ONE), reading], SchedulerConfig()).pods()["default/needs-one"]
    assert (one["status"], one["gpu_indices"]) == ("Running", [0])


async def test_the_same_node_with_healthy_gpus_runs_both_pods_in_turn() -> None:
    """Control: with a healthy reading the two-GPU pod is placed, so the pending above is the GPU's doing."""
    reading = await _agent_reading(RecordedNvml([Gpu(uuid="GPU-0"), Gpu(uuid="GPU-1")]))
    assert all(g.healthy for g in reading.gpus)
    result = simulate([*_scenario(NEEDS_TWO), reading], SchedulerConfig())
    two = result.pods()["default/needs-two"]
    assert (two["status"], two["gpu_indices"]) == ("Running", [0, 1])
    assert not any(isinstance(d, PodPending) for d in result.decisions)


async def test_a_lost_gpu_is_as_unplaceable_as_a_fatal_xid() -> None:
    api = RecordedNvml([Gpu(uuid="GPU-0", memory=nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)), Gpu(uuid="GPU-1")])
    reading = await _agent_reading(api)
    assert reading.gpus[0].reason == "NVML GpuIsLost"
    one = simulate([*_scenario(NEEDS_ONE), reading], SchedulerConfig()).pods()["default/needs-one"]
    assert (one["status"], one["gpu_indices"]) == ("Running", [1])
