"""The ported KAI action tests (``tests/kai_ported/cases``) as API objects, for the cases the API server can express.

The objects come from the same reading of KAI's test builders as the ported tests use (``tests/kai_builders.py``: queues
under a default department, nodes, PodGroups and pods with KAI's default requests, jobs oldest first), written
back as the manifests a cluster would hold: Queues (``scheduling.run.ai/v2``), Nodes, PodGroups and Pods, running
pods with ``spec.nodeName`` set at creation. ``expressible`` says why a case cannot be put on the API server, or
None:

* a priority other than the PriorityClasses KAI's chart installs (50, 75, 100, 125): the API server takes a
  priority only through a class;
* an explicit preemptibility, GPU-memory requests, or a job age: no manifest field carries them here;
* a running GPU fraction: KAI accounts a shared GPU only through the reservation pod its own binder creates
  (see the consolidation scenario in the README), so it cannot see one that was placed before it started;
* a pod in any state but Pending or Running (releasing, pipelined), or a job deleted during the test.
"""

from __future__ import annotations

from typing import Any

from kai_stream.core.events import NodeObserved, PodGroupObserved, PodObserved, QueueObserved, QueueResource
from kai_stream.core.manifests import ANNOTATION_GPU_FRACTION, ANNOTATION_POD_GROUP, LABEL_QUEUE
from tests.kai_builders import events
from tests.kai_ported.kai_harness import NOW, Case, load_cases

PRIORITY_CLASSES = {50: "train", 75: "build-preemptible", 100: "build", 125: "inference"}
MB = 10**6


def expressible(case: Case) -> str | None:
    """Why ``case`` cannot be applied to an API server (see the module docstring), or None."""
    topology = case.topology
    if topology.get("DeleteJobInTest") or any(j.get("DeleteJobInTest") for j in topology.get("Jobs") or []):
        return "deletes a job during the test"
    if topology.get("Topologies"):
        return "Topology objects and topology constraints are not written here"
    for job in topology.get("Jobs") or []:
        if "children" in (job.get("RootSubGroupSet") or {}):
            return "subgroups are not written here"
        if int(job.get("Priority", 0)) not in PRIORITY_CLASSES:
            return f"priority {job.get('Priority', 0)} has no PriorityClass"
        for field in ("Preemptibility", "RequiredGpuMemory", "JobAgeInMinutes"):
            if job.get(field):
                return f"{field} has no manifest field here"
        per_task = float(job.get("RequiredGPUsPerTask", 0) or 0)
        for task in job.get("Tasks") or []:
            if task.get("NodeAffinityNames"):
                return "node affinity is not written here"
            state = task.get("State", "Pending")
            if state not in ("Pending", "Running"):
                return f"a task in state {state}"
            gpus = per_task if task.get("RequiredGPUs") is None else float(task["RequiredGPUs"])
            if state == "Running" and gpus != int(gpus):
                return "a running GPU fraction (KAI sees only those its own binder placed)"
    return None


def dns(name: str) -> str:
    """A KAI test name as a Kubernetes object name (lower case, ``-`` for ``_``)."""
    return name.lower().replace("_", "-")


def _quantity(amount: int, scale: int) -> float | int:
    return -1 if amount == -1 else (amount // scale if amount % scale == 0 else amount / scale)


def _resource(res: QueueResource, scale: int) -> dict[str, Any]:
    return {"quota": _quantity(res.quota, scale), "overQuotaWeight": res.over_quota_weight,
            "limit": _quantity(res.limit, scale)}


def objects(case: Case) -> list[dict[str, Any]]:
    """The case's queues, nodes, PodGroups and pods as API objects (pods in the order the jobs were created)."""
    objs: list[dict[str, Any]] = []
    for event in events(case.topology, NOW):
        if isinstance(event, QueueObserved):
            objs.append(_queue(event))
        elif isinstance(event, NodeObserved):
            objs.append(_node(event))
        elif isinstance(event, PodGroupObserved):
            group = event.pod_group
            objs.append({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                         "metadata": {"name": dns(group.name), "namespace": group.namespace},
                         "spec": {"minMember": group.min_member, "queue": dns(group.queue),
                                  "priorityClassName": PRIORITY_CLASSES[group.priority or 0]}})
        elif isinstance(event, PodObserved):
            objs.append(_pod(event))
    return objs


def _queue(event: QueueObserved) -> dict[str, Any]:
    queue = event.queue
    spec: dict[str, Any] = {"priority": queue.priority, "resources": {
        "gpu": _resource(queue.resources.gpu, 1000), "cpu": _resource(queue.resources.cpu, 1),
        "memory": _resource(queue.resources.memory, MB)}}
    if queue.parent:
        spec["parentQueue"] = dns(queue.parent)
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": dns(queue.name)},
            "spec": spec}


def _node(event: NodeObserved) -> dict[str, Any]:
    node = event.node
    allocatable = {"nvidia.com/gpu": str(node.allocatable.gpu_milli // 1000),
                   "cpu": f"{node.allocatable.cpu_milli}m", "memory": str(node.allocatable.memory)}
    return {"apiVersion": "v1", "kind": "Node", "status": {"allocatable": allocatable},
            "metadata": {"name": dns(node.name), "labels": dict(node.labels)}}


def _pod(event: PodObserved) -> dict[str, Any]:
    pod = event.pod
    limits: dict[str, str] = {"cpu": f"{pod.requests.cpu_milli}m", "memory": str(pod.requests.memory)}
    annotations = {ANNOTATION_POD_GROUP: dns(pod.pod_group)} if pod.pod_group else {}
    if pod.gpu_fraction_milli:
        annotations[ANNOTATION_GPU_FRACTION] = f"{pod.gpu_fraction_milli / 1000:g}"
    elif pod.requests.gpu_milli:
        limits["nvidia.com/gpu"] = str(pod.requests.gpu_milli // 1000)
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler", "priorityClassName": PRIORITY_CLASSES[pod.priority or 0],
                            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": limits}}]}
    if pod.node_name:
        spec["nodeName"] = dns(pod.node_name)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": dns(pod.name), "namespace": pod.namespace, "labels": {LABEL_QUEUE: dns(pod.queue)},
                         "annotations": annotations},
            "spec": spec}


def cases(match: str = "") -> list[tuple[str, Case]]:
    """Every expressible ported case whose id contains ``match``, with a short name for the table."""
    return [(f"kai:{case.file.split('__')[-1].removesuffix('_test')}#{i}", case)
            for i, case in enumerate(load_cases()) if match in case.id and expressible(case) is None]
