"""DRA allocation by the pure core: a bind of a pod with ResourceClaims carries the node's devices for them
(``BindRequested.dra_devices``), deterministically, never a device twice, and devices of claims already allocated
(``status.allocation`` of a bound pod's claim) are counted as taken."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.dra import allocate
from kai_stream.core.events import (
    BindRequested,
    DraDevice,
    DraRequest,
    NodeObserved,
    NodeSpec,
    PodObserved,
    PodPending,
    PodSpec,
    Resources,
)
from kai_stream.core.manifests import load_scenario
from kai_stream.simulate import simulate

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "dra.yaml"
TEXT = SCENARIO.read_text()


def _binds(text: str) -> dict[str, BindRequested]:
    result = simulate(load_scenario(text), SchedulerConfig())
    return {d.name: d for d in result.decisions if isinstance(d, BindRequested)}


def test_a_bind_carries_the_devices_of_the_node_for_the_claims() -> None:
    binds = _binds(TEXT)
    a_two = binds["a-two"]
    assert a_two.node == "node-dra" and sorted(a_two.gpu_indices) == [0, 1]
    assert [(d.claim, d.resource_claim, d.request, d.driver, d.pool, d.device) for d in a_two.dra_devices] == [
        ("gpus", None, "gpus", "gpu.nvidia.com", "node-dra", "gpu-0"),
        ("gpus", None, "gpus", "gpu.nvidia.com", "node-dra", "gpu-1"),
    ]
    assert binds["f-plugin"].dra_devices == ()
    assert _binds(TEXT) == binds, "the same log, the same devices"


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(TEXT) if d]


def _with_one_held() -> str:
    """dra.yaml where a pod of another scheduler already runs on node-dra with claim ``held`` allocated gpu-1, and
    the two-GPU pod is gone: b-one (one GPU, claim by name) can only get gpu-0."""
    docs = [d for d in _docs() if (d.get("metadata") or {}).get("name") != "a-two"]
    docs.append({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "held", "namespace": "demo"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-dra", "device": "gpu-1"}]}}},
    })
    docs.append({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "demo"},
        "spec": {"schedulerName": "default-scheduler", "nodeName": "node-dra",
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": "held"}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}]},
        "status": {"phase": "Running"},
    })
    return yaml.safe_dump_all(docs)


def test_devices_of_claims_already_allocated_are_not_given_again() -> None:
    text = _with_one_held()
    observed = {e.pod.name: e.pod for e in load_scenario(text) if isinstance(e, PodObserved)}
    assert observed["other"].gpu_indices == (1,), "the allocated device's index is the running pod's GPU"
    binds = _binds(text)
    assert [(d.resource_claim, d.device) for d in binds["b-one"].dra_devices] == [("one-gpu", "gpu-0")]


def test_no_device_twice_when_the_node_is_full() -> None:
    docs = _docs()
    for doc in docs:
        if (doc.get("metadata") or {}).get("name") == "one-gpu":
            doc["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    result = simulate(load_scenario(yaml.safe_dump_all(docs)), SchedulerConfig())
    taken = [(d.pool, d.device) for b in result.decisions if isinstance(b, BindRequested) for d in b.dra_devices]
    assert len(taken) == len(set(taken)) == 2
    pending = {d.name for d in result.decisions if isinstance(d, PodPending)}
    assert "b-one" in pending


def test_nodes_publish_their_devices_in_slice_order() -> None:
    nodes = {e.node.name: e.node for e in load_scenario(TEXT) if isinstance(e, NodeObserved)}
    assert [d.device for d in nodes["node-dra"].dra_devices] == ["gpu-0", "gpu-1"]
    assert nodes["node-plugin"].dra_devices == ()


def test_allocate_is_empty_when_an_index_is_not_a_published_device() -> None:
    node = NodeSpec(name="n", allocatable=Resources(gpu_milli=3000),
                    dra_devices=(DraDevice(driver="gpu.nvidia.com", pool="n", device="g0"),))
    pod = PodSpec(namespace="ns", name="p", uid="u", queue="q", requests=Resources(gpu_milli=1000),
                  dra_requests=(DraRequest(claim="c", resource_claim="c", request="r", count=1),))
    assert [d.device for d in allocate(pod, node, (0,))] == ["g0"]
    assert allocate(pod, node, (2,)) == (), "a device-plugin GPU is no device of the claim"
    assert allocate(pod, node, (0, 1)) == (), "more GPUs than the claims ask for"


def test_devices_of_claims_no_seen_pod_names_are_taken() -> None:
    """The claim ``held`` is allocated gpu-1 but its pod is not observed (another scheduler's, or not seen): gpu-1
    is left out of the node, so b-one gets gpu-0 and a second one-GPU pod finds no device."""
    docs = [d for d in yaml.safe_load_all(_with_one_held()) if (d.get("metadata") or {}).get("name") != "other"]
    nodes = {e.node.name: e.node for e in load_scenario(yaml.safe_dump_all(docs)) if isinstance(e, NodeObserved)}
    assert [d.device for d in nodes["node-dra"].dra_devices] == ["gpu-0"]
    assert nodes["node-dra"].allocatable.gpu_milli == 1000
    binds = _binds(yaml.safe_dump_all(docs))
    assert [(d.resource_claim, d.device) for d in binds["b-one"].dra_devices] == [("one-gpu", "gpu-0")]
    assert all(d.device != "gpu-1" for b in binds.values() for d in b.dra_devices)
