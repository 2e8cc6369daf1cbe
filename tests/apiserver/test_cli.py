"""`kai-stream cluster --engine apiserver --scenario FILE` as a real process: starts etcd + kube-apiserver + KWOK,
loads the scenario (nodes with their status, a queue, a pod), prints the admin kubeconfig, and stops everything
on SIGINT."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from .conftest import kubeconfig_client

pytestmark = pytest.mark.apiserver

SCENARIO = """
apiVersion: v1
kind: Node
metadata: {name: cli-node}
status: {capacity: {nvidia.com/gpu: "4"}, allocatable: {nvidia.com/gpu: "4"}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: cli-queue}
spec: {}
---
apiVersion: v1
kind: Pod
metadata: {name: cli-pod, namespace: ml}
spec:
  nodeName: cli-node
  terminationGracePeriodSeconds: 0
  containers: [{name: c, image: busybox}]
"""


async def test_cluster_engine_apiserver_serves_scenario_until_sigint(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    workdir = tmp_path / "plane"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from kai_stream.cli import main; main()", "cluster", "--engine", "apiserver",
        "--scenario", str(scenario), "--workdir", str(workdir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        kubeconfig = (await asyncio.wait_for(proc.stdout.readline(), 1800)).decode().strip()
        assert kubeconfig == str(workdir / "admin.kubeconfig"), (await proc.stderr.read()).decode()  # type: ignore[union-attr]
        api = await kubeconfig_client(Path(kubeconfig))
        try:
            v1 = client.CoreV1Api(api)
            nodes = (await v1.list_node()).items
            assert [(n.metadata.name, n.status.capacity["nvidia.com/gpu"]) for n in nodes] == [("cli-node", "4")]
            assert not nodes[0].spec.taints, "a scenario node is schedulable"
            queues = await client.CustomObjectsApi(api).list_cluster_custom_object("scheduling.run.ai", "v2", "queues")
            assert [q["metadata"]["name"] for q in queues["items"]] == ["cli-queue"]
            deadline = time.monotonic() + 30
            while (await v1.read_namespaced_pod("cli-pod", "ml")).status.phase != "Running":
                assert time.monotonic() < deadline, "KWOK did not run the pod"
                await asyncio.sleep(0.2)
        finally:
            await api.close()
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        for name in ("etcd", "kube-apiserver", "kwok"):
            assert (workdir / f"{name}.log").exists()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
