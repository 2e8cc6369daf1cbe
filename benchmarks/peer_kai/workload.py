"""The one workload both schedulers get: KWOK GPU nodes, queues in two levels (departments over leaf queues) and
pods of three shapes, in a fixed order with no randomness, so each scheduler sees exactly the same objects.

Pods come in blocks of 20: 8 whole-GPU pods, 8 fractional pods (``gpu-fraction`` 0.5 and 0.25 alternating) and one
gang of 4 one-GPU pods under a PodGroup (minMember 4): 0.75 GPU per pod on average. Jobs go to the leaf queues in
turn. The first ``steady_share`` of the pods is meant to be created at a steady rate, the rest in one burst; a gang
belongs wholly to the phase of its first pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

NAMESPACE = "peer-bench"
SCHEDULER_NAME = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
BLOCK = (("whole", 8), ("fraction", 8), ("gang", 1))

Phase = Literal["steady", "burst"]


@dataclass(frozen=True)
class WorkloadSpec:
    nodes: int
    pods: int
    gpus_per_node: int = 8
    departments: int = 4
    queues_per_department: int = 5
    gang_size: int = 4
    steady_share: float = 0.5

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.pods < 1 or self.gpus_per_node < 1 or self.gang_size < 1:
            raise ValueError("nodes, pods, gpus per node and gang size must be at least 1")
        if self.departments < 1 or self.queues_per_department < 1:
            raise ValueError("at least one department with one queue")
        if not 0.0 <= self.steady_share <= 1.0:
            raise ValueError("steady share must be within [0, 1]")


@dataclass(frozen=True)
class Job:
    """One unit of submission: a single pod, or a gang's PodGroup with its pods (created together)."""

    phase: Phase
    pods: tuple[dict[str, Any], ...]
    podgroup: dict[str, Any] | None = None


@dataclass
class Workload:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    queues: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)

    def pod_count(self, phase: Phase | None = None) -> int:
        return sum(len(job.pods) for job in self.jobs if phase is None or job.phase == phase)

    def gpu_demand(self) -> float:
        return sum(pod_gpus(pod) for job in self.jobs for pod in job.pods)


def pod_gpus(pod: dict[str, Any]) -> float:
    fraction = pod["metadata"].get("annotations", {}).get("gpu-fraction")
    if fraction is not None:
        return float(fraction)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    return float(limits.get("nvidia.com/gpu", 0))


def _node(name: str, gpus: int) -> dict[str, Any]:
    resources = {"nvidia.com/gpu": str(gpus), "cpu": "128", "memory": "1Ti", "pods": "250"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.memory": "81920", "type": "kwok"}},
            "status": {"allocatable": dict(resources), "capacity": dict(resources)}}


def _queue(name: str, gpu_quota: int, parent: str | None) -> dict[str, Any]:
    unlimited = {"quota": -1, "overQuotaWeight": 1, "limit": -1}
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": gpu_quota, "overQuotaWeight": 1, "limit": -1},
                                          "cpu": dict(unlimited), "memory": dict(unlimited)}}
    if parent is not None:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def _pod(name: str, queue: str, *, gpus: int = 0, fraction: str | None = None,
         group: str | None = None) -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    annotations = {}
    if fraction is not None:
        annotations["gpu-fraction"] = fraction
    if group is not None:
        annotations["pod-group-name"] = group
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {QUEUE_LABEL: queue},
                         "annotations": annotations},
            "spec": {"schedulerName": SCHEDULER_NAME, "priorityClassName": "train",
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": limits, "requests": dict(limits)}}]}}


def _podgroup(name: str, queue: str, size: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {QUEUE_LABEL: queue}},
            "spec": {"minMember": size, "queue": queue, "priorityClassName": "train"}}


def leaf_queues(spec: WorkloadSpec) -> list[str]:
    return [f"dept-{d + 1}-q{q + 1}" for d in range(spec.departments) for q in range(spec.queues_per_department)]


def build(spec: WorkloadSpec) -> Workload:
    """The workload of ``spec``: departments deserve equal shares of all GPUs, their queues equal shares of that."""
    workload = Workload(nodes=[_node(f"kwok-node-{i:05d}", spec.gpus_per_node) for i in range(spec.nodes)])
    department_quota = spec.nodes * spec.gpus_per_node // spec.departments
    for d in range(spec.departments):
        department = f"dept-{d + 1}"
        workload.queues.append(_queue(department, department_quota, None))
        for q in range(spec.queues_per_department):
            workload.queues.append(
                _queue(f"{department}-q{q + 1}", department_quota // spec.queues_per_department, department))
    queues = leaf_queues(spec)
    steady_pods = round(spec.pods * spec.steady_share)
    created = fractions = 0
    shapes = [shape for shape, count in BLOCK for _ in range(count)]
    while created < spec.pods:
        shape = shapes[len(workload.jobs) % len(shapes)]
        queue = queues[len(workload.jobs) % len(queues)]
        phase: Phase = "steady" if created < steady_pods else "burst"
        index = len(workload.jobs)
        if shape == "gang" and spec.pods - created >= spec.gang_size:
            group = f"gang-{index:06d}"
            pods = tuple(_pod(f"{group}-{m}", queue, gpus=1, group=group) for m in range(spec.gang_size))
            workload.jobs.append(Job(phase, pods, _podgroup(group, queue, spec.gang_size)))
        elif shape == "fraction":
            fraction = "0.5" if fractions % 2 == 0 else "0.25"
            fractions += 1
            workload.jobs.append(Job(phase, (_pod(f"frac-{index:06d}", queue, fraction=fraction),)))
        else:
            workload.jobs.append(Job(phase, (_pod(f"whole-{index:06d}", queue, gpus=1),)))
        created += len(workload.jobs[-1].pods)
    return workload
