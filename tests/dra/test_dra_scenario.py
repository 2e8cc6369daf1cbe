"""DRA, count-only, through the in-process scheduler: GPUs claimed through ResourceClaims / ResourceClaimTemplates of
a GPU DeviceClass are counted against the ResourceSlices of nodes, a claiming pod never lands on a node that
publishes no devices (even with free device-plugin GPUs), and what is not supported is refused with its reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.dra import LABEL_DRA_GPUS, DraIndex
from kai_stream.core.events import NodeObserved, PodObserved, PodPending
from kai_stream.core.manifests import load_scenario, object_to_events
from kai_stream.simulate import simulate

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "dra.yaml"


def _run() -> tuple[dict[str, dict[str, Any]], dict[str, PodPending]]:
    result = simulate(load_scenario(SCENARIO.read_text()), SchedulerConfig())
    pending = {f"{d.namespace}/{d.name}": d for d in result.decisions if isinstance(d, PodPending)}
    return result.pods(), pending


def test_claimed_gpus_are_counted_against_resource_slices() -> None:
    pods, pending = _run()
    result = simulate(load_scenario(SCENARIO.read_text()), SchedulerConfig())
    assert not [d for d in result.decisions if d.type == "EvictionRequested"], "device-plugin pod put on DRA GPUs"
    assert pods["demo/a-two"]["node"] == "node-dra" and pods["demo/a-two"]["status"] == "Running"
    assert pods["demo/f-plugin"]["node"] == "node-plugin"
    assert pods["demo/b-one"]["status"] == "Pending"
    assert pending["demo/b-one"].code == "NoNodeFits"
    assert set(pending["demo/b-one"].predicates) >= {"NodeAffinity"}


def test_unsupported_claims_are_refused_with_their_reason() -> None:
    pods, pending = _run()
    for name in ("demo/c-selector", "demo/d-shared", "demo/e-shared"):
        assert pods[name]["status"] == "Pending"
        assert pending[name].code == "ResourceClaimUnusable"
    assert "selectors on device attributes are not supported" in pending["demo/c-selector"].reason
    assert "shared by 2 pods (demo/d-shared, demo/e-shared)" in pending["demo/d-shared"].reason


def test_events_carry_the_counts() -> None:
    events = load_scenario(SCENARIO.read_text())
    nodes = {e.node.name: e.node for e in events if isinstance(e, NodeObserved)}
    assert nodes["node-dra"].allocatable.gpu_milli == 2000 and nodes["node-dra"].labels[LABEL_DRA_GPUS] == "2"
    assert nodes["node-plugin"].allocatable.gpu_milli == 4000 and LABEL_DRA_GPUS not in nodes["node-plugin"].labels
    pods = {e.pod.name: e.pod for e in events if isinstance(e, PodObserved)}
    assert pods["a-two"].requests.gpu_milli == 2000 and pods["a-two"].refused is None
    assert pods["a-two"].affinity[0].match_expressions[-1].key == LABEL_DRA_GPUS
    [plugin_term] = pods["f-plugin"].affinity
    assert [(r.key, r.operator) for r in plugin_term.match_expressions] == [(LABEL_DRA_GPUS, "DoesNotExist")]


def _pod(claim: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"schedulerName": "kai-scheduler", "resourceClaims": [{"name": "g", **claim}],
                     "containers": [{"name": "c"}]}}


def _claim(request: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "r", **request}]}}}


def _refused(index: DraIndex, pod: dict[str, Any]) -> str | None:
    [event] = object_to_events(pod, ts=0.0, dra=index)
    assert isinstance(event, PodObserved)
    return event.pod.refused


def test_each_unsupported_feature_and_missing_object_is_named() -> None:
    index = DraIndex()
    pod = _pod({"resourceClaimName": "c"})
    index.pod_seen(pod)
    assert "ResourceClaim ns/c not observed" in (_refused(index, pod) or "")
    index.upsert(_claim({"exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}))
    assert "DeviceClass 'gpu.nvidia.com' not observed" in (_refused(index, pod) or "")
    index.upsert({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"}})
    index.upsert({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "nic"},
                  "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nic.example.com"'}}]}})
    assert _refused(index, pod) is None
    for request, words in (
        ({"exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}, "allocationMode All"),
        ({"exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}}, "admin access"),
        ({"firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]}, "firstAvailable"),
        ({"exactly": {"deviceClassName": "nic"}}, "'nic' is not a GPU class"),
        ({"deviceClassName": "gpu.nvidia.com", "count": 1, "selectors": [{"cel": {"expression": "true"}}]},
         "selectors on device attributes"),
    ):
        index.upsert(_claim(request))
        assert words in (_refused(index, pod) or ""), request
    mixed = _pod({"resourceClaimName": "c"})
    mixed["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    assert "device-plugin GPUs" in (_refused(index, mixed) or "")
    template = _pod({"resourceClaimTemplateName": "t"})
    assert "ResourceClaimTemplate ns/t not observed" in (_refused(index, template) or "")


def test_the_binders_view_counts_the_nodes_resource_slices() -> None:
    from kai_stream.binder.room import lacks_room
    from tests.binder.builders import bind

    node = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}
    slices = [{"kind": "ResourceSlice", "apiVersion": "resource.k8s.io/v1", "metadata": {"name": "s"},
               "spec": {"nodeName": "n", "driver": "gpu.nvidia.com", "devices": [{"name": "g0"}, {"name": "g1"}]}}]
    decision = bind({"metadata": {"namespace": "ns", "name": "p", "uid": "u"}}, "n", gpus=(0, 1))
    assert "lacks free GPUs" in (lacks_room(decision, node, []) or "")
    assert lacks_room(decision, node, [], None, slices) is None
