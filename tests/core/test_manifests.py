"""Manifests -> events: real KAI/Kubernetes objects convert with the right units; bad input names the field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kai_stream.core.events import NodeObserved, PodGroupObserved, PodObserved, QueueObserved, TopologyObserved
from kai_stream.core.manifests import ManifestError, load_scenario, object_to_events

GI = 2**30


def _one(obj: dict[str, Any], **kw: Any) -> Any:
    events = object_to_events(obj, ts=5.0, **kw)
    assert len(events) == 1
    return events[0]


def test_node() -> None:
    event = _one(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "dgx-1",
                "uid": "u1",
                "resourceVersion": "7",
                "labels": {"kai.scheduler/node-pool": "west", "nvidia.com/gpu.memory": "81920"},
            },
            "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "63500m", "memory": "512Gi"},
                "conditions": [{"type": "Ready", "status": "False"}],
            },
        }
    )
    assert isinstance(event, NodeObserved)
    node = event.node
    assert (node.pool, event.pool, node.gpu_memory_mib, node.ready) == ("west", "west", 81920, False)
    assert (node.allocatable.gpu_milli, node.allocatable.cpu_milli, node.allocatable.memory) == (8000, 63500, 512 * GI)
    assert node.taints[0].key == "k"


def test_queue_units_gpu_devices_cpu_millicores_memory_mb() -> None:
    event = _one(
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "team"},
            "spec": {
                "parentQueue": "dept",
                "priority": 150,
                "resources": {
                    "gpu": {"quota": 1.5, "overQuotaWeight": 2, "limit": -1},
                    "cpu": {"quota": 2000, "limit": 4000},
                    "memory": {"quota": 1000, "limit": -1},
                },
            },
        }
    )
    assert isinstance(event, QueueObserved)
    q = event.queue
    assert (q.parent, q.priority, event.pool) == ("dept", 150, "*")
    assert (q.resources.gpu.quota, q.resources.gpu.over_quota_weight, q.resources.gpu.limit) == (1500, 2, -1)
    assert (q.resources.cpu.quota, q.resources.cpu.limit) == (2000, 4000)
    assert q.resources.memory.quota == 1000 * 10**6


def _queue_spec(**spec: Any) -> Any:
    event = _one({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"}, "spec": spec})
    assert isinstance(event, QueueObserved)
    return event.queue


def test_queue_min_runtimes_are_read_into_their_own_fields() -> None:
    q = _queue_spec(preemptMinRuntime="4h", reclaimMinRuntime="15m")
    assert (q.min_runtime_s, q.preempt_min_runtime_s, q.reclaim_min_runtime_s) == (None, 4 * 3600.0, 15 * 60.0)
    q = _queue_spec(minRuntime="1h30m", preemptMinRuntime=-1, reclaimMinRuntime=90)
    assert (q.min_runtime_s, q.preempt_min_runtime_s, q.reclaim_min_runtime_s) == (5400.0, -1.0, 90.0)
    q = _queue_spec(reclaimMinRuntime="-1")
    assert (q.min_runtime_s, q.preempt_min_runtime_s, q.reclaim_min_runtime_s) == (None, None, -1.0)
    assert _queue_spec().reclaim_min_runtime_s is None


def _pod(**spec: Any) -> dict[str, Any]:
    metadata = spec.pop("metadata", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "labels": {"kai.scheduler/queue": "q"}, **metadata},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 2, "cpu": "1", "memory": "1Gi"}}}],
            **spec,
        },
    }


def test_pod_requests_and_running_on_node() -> None:
    pod = _one(_pod(nodeName="n1", metadata={"annotations": {"kai.scheduler/duration-seconds": "30"}})).pod
    assert (pod.requests.gpu_milli, pod.requests.cpu_milli, pod.requests.memory) == (2000, 1000, GI)
    assert (pod.node_name, pod.phase, pod.queue, pod.duration_s, pod.managed) == ("n1", "Running", "q", 30.0, True)


def test_pod_fraction_memory_group_and_terminating() -> None:
    base = _pod(containers=[{"name": "a"}])
    base["metadata"]["annotations"] = {"gpu-fraction": "0.5", "pod-group-name": "g"}
    base["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pod = _one(base).pod
    assert (pod.gpu_fraction_milli, pod.requests.gpu_milli, pod.pod_group, pod.terminating) == (500, 500, "g", True)
    mem = _pod(containers=[{"name": "a"}])
    mem["metadata"]["annotations"] = {"gpu-memory": "20000"}
    pod = _one(mem).pod
    assert (pod.gpu_memory_mib, pod.requests.gpu_milli) == (20000, 0)


def test_foreign_pods_only_when_bound() -> None:
    assert object_to_events(_pod(schedulerName="default-scheduler"), ts=0.0) == []
    pod = _one(_pod(schedulerName="default-scheduler", nodeName="n1")).pod
    assert (pod.managed, pod.queue) == (False, "")
    finished = _one({**_pod(schedulerName="default-scheduler", nodeName="n1"), "status": {"phase": "Succeeded"}}).pod
    assert finished.phase == "Succeeded"
    custom = _one(_pod(schedulerName="mine"), scheduler_name="mine").pod
    assert custom.managed


def test_pod_group_topology_and_priority_class() -> None:
    group = _one(
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"minMember": 4, "queue": "q", "priorityClassName": "build", "preemptibility": "preemptible"},
        }
    )
    assert isinstance(group, PodGroupObserved)
    assert (group.pod_group.min_member, group.pod_group.preemptible, group.pod_group.priority_class) == (
        4,
        True,
        "build",
    )
    topo = _one(
        {
            "apiVersion": "kai.scheduler/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": "dc"},
            "spec": {"levels": [{"nodeLabel": "zone"}, {"nodeLabel": "rack"}]},
        }
    )
    assert isinstance(topo, TopologyObserved) and topo.topology.levels == ("zone", "rack")
    pc = _one({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "x"}, "value": 7})
    assert pc.priority_class.value == 7


def test_event_ids_are_stable_and_follow_content() -> None:
    with_version = _pod(metadata={"uid": "u", "resourceVersion": "9"})
    assert _one(with_version).event_id == _one(with_version).event_id
    a, b = _pod(), _pod(nodeName="n1")
    assert _one(a).event_id == _one(_pod()).event_id
    assert _one(a).event_id != _one(b).event_id


QUEUE = "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: q}\nspec: {resources: {gpu: {quota: 1}}}\n"
POD = (
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, labels: {kai.scheduler/queue: q}}\n"
    "spec: {schedulerName: kai-scheduler, containers: [{name: c}]}\n"
)


def _doc(text: str, **patch: Any) -> str:
    obj = yaml.safe_load(text)
    for path, value in patch.items():
        node = obj
        parts = path.split("__")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return yaml.safe_dump(obj)


ERRORS = [
    ("unknown kind", QUEUE + "---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n", ["Service", "kind"]),
    ("bad apiVersion", _doc(QUEUE, apiVersion="scheduling.run.ai/v1"), ["Queue q", "apiVersion"]),
    (
        "bad quantity",
        QUEUE + "---\n" + _doc(POD, spec__containers=[{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]),
        ["Pod ns/p", "spec.containers[0].resources.requests.cpu", "lots"],
    ),
    ("queue missing", POD, ["Pod ns/p", "kai.scheduler/queue", "'q' does not exist"]),
    ("default queue missing", _doc(POD, metadata__labels={}), ["Pod ns/p", "default-queue"]),
    (
        "negative quota",
        _doc(QUEUE, spec={"resources": {"gpu": {"quota": -2}}}),
        ["Queue q", "spec.resources.gpu.quota"],
    ),
    (
        "negative limit",
        _doc(QUEUE, spec={"resources": {"cpu": {"limit": -5}}}),
        ["Queue q", "spec.resources.cpu.limit"],
    ),
    (
        "bad weight",
        _doc(QUEUE, spec={"resources": {"gpu": {"overQuotaWeight": 1.5}}}),
        ["spec.resources.gpu.overQuotaWeight"],
    ),
    (
        "cycle",
        _doc(QUEUE, spec={"parentQueue": "r"})
        + "---\n"
        + _doc(QUEUE, metadata={"name": "r"}, spec={"parentQueue": "q"}),
        ["spec.parentQueue", "cycle"],
    ),
    ("missing parent", _doc(QUEUE, spec={"parentQueue": "nope"}), ["Queue q", "spec.parentQueue", "nope"]),
    (
        "pod in parent queue",
        QUEUE + "---\n" + _doc(QUEUE, metadata={"name": "leaf"}, spec={"parentQueue": "q"}) + "---\n" + POD,
        ["Pod ns/p", "not a leaf"],
    ),
    (
        "missing pod group",
        QUEUE + "---\n" + _doc(POD, metadata__annotations={"pod-group-name": "g"}),
        ["Pod ns/p", "pod-group-name", "'g'"],
    ),
    ("duplicate", QUEUE + "---\n" + QUEUE, ["Queue q", "duplicate"]),
    (
        "bad reclaim min-runtime",
        _doc(QUEUE, spec={"preemptMinRuntime": "4h", "reclaimMinRuntime": "15 minutes"}),
        ["Queue q", "spec.reclaimMinRuntime", "15 minutes"],
    ),
    (
        "negative preempt min-runtime",
        _doc(QUEUE, spec={"preemptMinRuntime": -5}),
        ["Queue q", "spec.preemptMinRuntime", "-1"],
    ),
    (
        "fraction out of range",
        QUEUE + "---\n" + _doc(POD, metadata__annotations={"gpu-fraction": "1.5"}),
        ["Pod ns/p", "metadata.annotations.gpu-fraction"],
    ),
    (
        "fraction and whole GPUs",
        QUEUE
        + "---\n"
        + _doc(
            POD,
            metadata__annotations={"gpu-fraction": "0.5"},
            spec__containers=[{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        ),
        ["gpu-fraction", "cannot be combined"],
    ),
    (
        "fractional whole GPU",
        QUEUE
        + "---\n"
        + _doc(POD, spec__containers=[{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]),
        ["nvidia.com/gpu"],
    ),
    ("bad phase", QUEUE + "---\n" + _doc(POD, status={"phase": "Dancing"}), ["status.phase"]),
    ("not yaml", "a: [b", ["not valid YAML"]),
    ("scalar document", "42\n", ["expected a mapping"]),
    ("no name", _doc(QUEUE, metadata={}), ["metadata.name"]),
    ("bad creation time", _doc(QUEUE, metadata={"name": "q", "creationTimestamp": "yesterday"}), ["creationTimestamp"]),
    (
        "bad operator",
        QUEUE
        + "---\n"
        + _doc(
            POD,
            spec__affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]
                    }
                }
            },
        ),
        ["matchExpressions[0].operator"],
    ),
]


@pytest.mark.parametrize(("label", "text", "fragments"), ERRORS, ids=[e[0] for e in ERRORS])
def test_scenario_errors_name_object_and_field(label: str, text: str, fragments: list[str]) -> None:
    with pytest.raises(ManifestError) as info:
        load_scenario(text)
    for fragment in fragments:
        assert fragment in str(info.value), f"{label}: {fragment!r} not in {info.value}"


def test_scenario_is_canonical_and_complete() -> None:
    text = QUEUE + "---\n" + POD + "---\n" + _doc(POD, metadata__name="p2")
    events = load_scenario(text)
    assert [type(e).__name__ for e in events] == ["QueueObserved", "PodObserved", "PodObserved"]
    shuffled = load_scenario(_doc(POD, metadata__name="p2") + "---\n" + POD + "---\n" + QUEUE)
    assert events == shuffled
    assert isinstance(events[1], PodObserved) and events[1].pod.name == "p"
