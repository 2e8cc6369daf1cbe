"""`kai-stream cluster --scenario FILE` as a real process: prints its URL, serves the scenario to
kubernetes-asyncio, stops cleanly on SIGINT."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from kubernetes_asyncio import client

from kai_stream.connectors.simcluster import api_client

SCENARIO = """
apiVersion: v1
kind: Node
metadata: {name: cli-node}
status: {capacity: {nvidia.com/gpu: "4"}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: cli-queue}
spec: {}
"""


async def test_cluster_command_serves_scenario_until_sigint(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from kai_stream.cli import main; main()", "cluster", "--scenario", str(scenario),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        url = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode().strip()
        assert url.startswith("http://127.0.0.1:")
        async with api_client(url) as api:
            nodes = await client.CoreV1Api(api).list_node()
            assert [n.metadata.name for n in nodes.items] == ["cli-node"]
            queues = await client.CustomObjectsApi(api).list_cluster_custom_object("scheduling.run.ai", "v2", "queues")
            assert [q["metadata"]["name"] for q in queues["items"]] == ["cli-queue"]
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
