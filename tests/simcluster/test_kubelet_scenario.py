"""Simulated kubelets (Running after binding, Succeeded after the duration annotation, nothing on an
unknown node) and scenario loading (nodes' allocatable, pods already on a node are Running)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kubernetes_asyncio import client, watch

from kai_stream.connectors.simcluster import DURATION_ANNOTATION, ScenarioError, SimCluster
from tests.kube_calls import send

from .manifests import binding, node, pod

SCENARIO = """
apiVersion: v1
kind: Node
metadata: {name: gpu-1, labels: {kai.scheduler/node-pool: a}}
status: {allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "8"}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a}
spec: {resources: {gpu: {quota: 8, limit: -1, overQuotaWeight: 1}}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: train}
value: 50
---
apiVersion: v1
kind: Pod
metadata:
  name: running
  namespace: team-a
  labels: {kai.scheduler/queue: team-a}
  annotations: {kai.scheduler/duration-seconds: "20"}
spec:
  nodeName: gpu-1
  schedulerName: kai-scheduler
  containers: [{name: main, image: busybox, resources: {limits: {nvidia.com/gpu: "2"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: waiting, namespace: team-a, labels: {kai.scheduler/queue: team-a}}
spec:
  schedulerName: kai-scheduler
  containers: [{name: main, image: busybox, resources: {limits: {nvidia.com/gpu: "1"}}}]
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: pg-waiting, namespace: team-a}
spec: {minMember: 1, queue: team-a}
"""


async def test_bound_pod_runs_then_succeeds(v1: client.CoreV1Api, sim: SimCluster) -> None:
    sim.load_objects([node("n1")])
    await send(v1.create_namespaced_pod, "default", pod("job", annotations={DURATION_ANNOTATION: "20"}))
    listed = await v1.list_namespaced_pod("default")
    async with watch.Watch() as w:
        stream = w.stream(v1.list_namespaced_pod, "default", resource_version=listed.metadata.resource_version,
                          timeout_seconds=5)
        response = await send(v1.create_namespaced_pod_binding, "job", "default", binding("job", "n1"),
                                                          _preload_content=False)
        assert response.status == 201
        phases = []
        async for event in stream:
            phases.append(event["object"].status.phase)
            if phases[-1] == "Succeeded":
                final = event["object"]
                break
    assert phases == ["Pending", "Running", "Succeeded"]
    assert final.status.start_time is not None
    assert {c.type: c.status for c in final.status.conditions}["Ready"] == "False"
    assert final.status.container_statuses[0].state.terminated.exit_code == 0


async def test_running_pod_has_kubelet_status(v1: client.CoreV1Api, sim: SimCluster) -> None:
    sim.load_objects([node("n1")])
    await send(v1.create_namespaced_pod, "default", pod("svc"))
    await v1.create_namespaced_pod_binding("svc", "default", binding("svc", "n1"), _preload_content=False)
    await sim.wait_until(lambda: sim.get("pods/default/svc")["status"]["phase"] == "Running", timeout=3)
    running = await v1.read_namespaced_pod("svc", "default")
    conditions = {c.type: c.status for c in running.status.conditions}
    assert conditions == {"PodScheduled": "True", "Initialized": "True", "ContainersReady": "True", "Ready": "True"}
    assert running.status.start_time is not None and running.status.pod_ip
    assert running.status.container_statuses[0].state.running is not None
    await asyncio.sleep(0.1)
    assert sim.get("pods/default/svc")["status"]["phase"] == "Running", "no duration annotation: runs on"


async def test_pod_bound_to_unknown_node_stays_pending(v1: client.CoreV1Api, sim: SimCluster) -> None:
    await send(v1.create_namespaced_pod, "default", pod("lost"))
    await v1.create_namespaced_pod_binding("lost", "default", binding("lost", "nowhere"), _preload_content=False)
    await asyncio.sleep(0.1)
    assert sim.get("pods/default/lost")["status"]["phase"] == "Pending"
    await send(v1.create_node, node("nowhere"))
    await sim.wait_until(lambda: sim.get("pods/default/lost")["status"]["phase"] == "Running", timeout=3)


async def test_scenario_file(tmp_path: Path, v1: client.CoreV1Api, sim: SimCluster) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    loaded = sim.load_scenario_file(path)
    assert [o["kind"] for o in loaded] == ["PriorityClass", "Queue", "Node", "PodGroup", "Pod", "Pod"]
    gpu_node = await v1.read_node("gpu-1")
    assert gpu_node.status.allocatable["nvidia.com/gpu"] == "8" and gpu_node.status.capacity["nvidia.com/gpu"] == "8"
    running = await v1.read_namespaced_pod("running", "team-a")
    assert running.status.phase == "Running" and running.spec.node_name == "gpu-1"
    assert (await v1.read_namespaced_pod("waiting", "team-a")).status.phase == "Pending"
    await sim.wait_until(lambda: sim.get("pods/team-a/running")["status"]["phase"] == "Succeeded", timeout=3)


def test_scenario_errors_name_the_document(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: example.com/v1\nkind: Widget\n"
                    "metadata: {name: w}\n")
    with pytest.raises(ScenarioError, match=r"document 1: unsupported apiVersion/kind example.com/v1/Widget"):
        SimCluster().load_scenario_file(path)
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata: {namespace: x}\n")
    with pytest.raises(ScenarioError, match=r"document 0 \(Pod\): metadata.name is required"):
        SimCluster().load_scenario_file(path)


@pytest.mark.parametrize("sim_options", [{"enforce_capacity": True}])
async def test_capacity_admission_rejects_overcommit(v1: client.CoreV1Api, sim: SimCluster) -> None:
    small = node("small")
    small["status"] = {"allocatable": {"cpu": "4", "nvidia.com/gpu": "1"}}
    sim.load_objects([small])
    for name in ("first", "second"):
        await send(v1.create_namespaced_pod, "default", pod(name))
    await v1.create_namespaced_pod_binding("first", "default", binding("first", "small"), _preload_content=False)
    await sim.wait_until(lambda: sim.get("pods/default/first")["status"]["phase"] == "Running", timeout=3)
    await v1.create_namespaced_pod_binding("second", "default", binding("second", "small"), _preload_content=False)
    await sim.wait_until(lambda: sim.get("pods/default/second")["status"]["phase"] == "Failed", timeout=3)
    rejected = await v1.read_namespaced_pod("second", "default")
    assert rejected.status.reason == "OutOfnvidia.com/gpu"
    assert (await v1.read_namespaced_pod("first", "default")).status.phase == "Running"
