"""``ControlPlane.load_objects`` writes a scenario's objects many at a time: every node arrives with its status
(written through ``/status``) and without the not-ready taint, the queue after them, and a second load of the
same objects leaves them as they are."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kai_stream.connectors.apiserver import ControlPlane

pytestmark = pytest.mark.apiserver


def scenario(tag: str, nodes: int) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"load-{tag}-{i:02d}", "labels": {"tag": tag}},
         "status": {"capacity": {"nvidia.com/gpu": str(1 + i % 8)}, "allocatable": {"nvidia.com/gpu": str(1 + i % 8)}}}
        for i in range(nodes)
    ]
    objs.append({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": f"load-{tag}"},
                 "spec": {}})
    return objs


def test_nodes_load_concurrently_with_their_status_and_no_taint(control_plane: ControlPlane) -> None:
    tag = uuid.uuid4().hex[:6]
    objs = scenario(tag, 40)
    control_plane.load_objects(objs, concurrency=16)
    control_plane.load_objects(objs, concurrency=16)
    code, listed = control_plane.request("GET", f"/api/v1/nodes?labelSelector=tag%3D{tag}")
    assert code == 200
    nodes = {item["metadata"]["name"]: item for item in listed["items"]}
    assert sorted(nodes) == [f"load-{tag}-{i:02d}" for i in range(40)]
    for i in range(40):
        node = nodes[f"load-{tag}-{i:02d}"]
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(1 + i % 8)
        assert not (node.get("spec") or {}).get("taints")
    code, queue = control_plane.request("GET", f"/apis/scheduling.run.ai/v2/queues/load-{tag}")
    assert code == 200 and queue["metadata"]["name"] == f"load-{tag}"
