"""The session's working objects: plain slotted dataclasses with int resources (no pydantic in hot loops).

Resource vectors are 3-lists indexed by ``GPU``, ``CPU``, ``MEM`` (GPU milli-devices, millicores, bytes).
Per-GPU bookkeeping on a node, in milli-devices:

* ``gpu_used``  — held now by bound, assumed or newly allocated tasks (releasing ones included);
* ``gpu_rel``   — the part of ``gpu_used`` held by releasing tasks (being evicted / terminating);
* ``gpu_pipe``  — reserved by pipelined tasks on releasing capacity.

``free_now = 1000 - used - max(0, pipe - rel)`` and ``free_future = 1000 - used + rel - pipe``; CPU and
memory follow the same rule. A task is bound only onto ``free_now`` and pipelined onto ``free_future``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from kai_stream.core.events import NodeAffinityTerm, SubGroupSpec, Taint, Toleration, TopologyConstraint

GPU, CPU, MEM = 0, 1, 2
RESOURCES = ("gpu", "cpu", "memory")
UNIT = 1000

PENDING = "Pending"
ALLOCATED = "Allocated"
PIPELINED = "Pipelined"
RUNNING = "Running"
RELEASING = "Releasing"

USED, REL, PIPE = 0, 1, 2
"""The buckets of a node's resources a task is counted in (``NodeInfo.add``): ``USED`` by a bound or running task
(a releasing one too), ``REL`` by a releasing one besides, ``PIPE`` by a pipelined one."""

JobClass = tuple[tuple[tuple[int, ...], ...], int, int, int, bool]
"""``Session.job_class``: pending task shapes, minMember, pods not releasing, active pods, preemptible."""


@dataclass(slots=True, eq=False)
class NodeInfo:
    name: str
    idx: int
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    ready: bool
    unschedulable: bool
    class_id: int
    gpu_memory_mib: int
    healthy: list[bool]
    gpu_used: list[int]
    gpu_rel: list[int]
    gpu_pipe: list[int]
    cpu_alloc: int
    mem_alloc: int
    cpu_used: int = 0
    cpu_rel: int = 0
    cpu_pipe: int = 0
    mem_used: int = 0
    mem_rel: int = 0
    mem_pipe: int = 0
    free_whole: int = 0
    gpu_faults: tuple[str, ...] = ()
    """One line per unhealthy GPU ("GPU 0 (GPU-uuid): fatal XID 79"), in index order, for pending reasons."""

    @property
    def gpu_count(self) -> int:
        return len(self.healthy)

    def gpu_free_now(self, g: int) -> int:
        return UNIT - self.gpu_used[g] - max(0, self.gpu_pipe[g] - self.gpu_rel[g])

    def gpu_free_future(self, g: int) -> int:
        return UNIT - self.gpu_used[g] + self.gpu_rel[g] - self.gpu_pipe[g]

    def cpu_free_now(self) -> int:
        return self.cpu_alloc - self.cpu_used - max(0, self.cpu_pipe - self.cpu_rel)

    def mem_free_now(self) -> int:
        return self.mem_alloc - self.mem_used - max(0, self.mem_pipe - self.mem_rel)

    def cpu_free_future(self) -> int:
        return self.cpu_alloc - self.cpu_used + self.cpu_rel - self.cpu_pipe

    def mem_free_future(self) -> int:
        return self.mem_alloc - self.mem_used + self.mem_rel - self.mem_pipe

    def add(self, task: TaskInfo, bucket: int, sign: int) -> None:
        """Add (``sign`` -1: take back) what ``task`` holds where it is placed (``gpu_portion`` on each of its
        ``gpus``, its CPU and memory) to one bucket of this node. The one place node resources are counted (KAI
        ``NodeInfo.AddTask``/``RemoveTask``)."""
        portion, cpu, mem = sign * task.gpu_portion, sign * task.cpu, sign * task.mem
        if bucket == USED:
            gpu = self.gpu_used
            self.cpu_used += cpu
            self.mem_used += mem
        elif bucket == REL:
            gpu = self.gpu_rel
            self.cpu_rel += cpu
            self.mem_rel += mem
        else:
            gpu = self.gpu_pipe
            self.cpu_pipe += cpu
            self.mem_pipe += mem
        for g in task.gpus:
            gpu[g] += portion

    def count_free_whole(self) -> int:
        """Healthy GPUs with nothing on them and nothing pipelined onto them (``free_now == UNIT``)."""
        return sum(
            1 for ok, u, p in zip(self.healthy, self.gpu_used, self.gpu_pipe, strict=True) if ok and not u and not p
        )


@dataclass(slots=True, eq=False, init=False)
class TaskInfo:
    uid: str
    namespace: str
    name: str
    job: JobInfo
    gpu_whole: int
    gpu_frac: int
    gpu_mem_mib: int
    cpu: int
    mem: int
    sig: int
    node_selector: dict[str, str]
    affinity: tuple[NodeAffinityTerm, ...]
    tolerations: tuple[Toleration, ...]
    created: float
    status: str = PENDING
    node: NodeInfo | None = None
    gpus: tuple[int, ...] = ()
    gpu_portion: int = 0
    prev_pipelined: tuple[str, tuple[int, ...]] | None = None
    started: float | None = None
    gpu_devices: int = 1
    """How many GPUs a fraction spans (``gpu-fraction-num-devices``): ``gpu_frac`` on each of them."""
    sub_group: str | None = None
    """The PodGroup subgroup the pod belongs to (label ``kai.scheduler/subgroup-name``)."""

    def __init__(
        self,
        uid: str,
        namespace: str,
        name: str,
        job: JobInfo,
        gpu_whole: int,
        gpu_frac: int,
        gpu_mem_mib: int,
        cpu: int,
        mem: int,
        sig: int,
        node_selector: dict[str, str],
        affinity: tuple[NodeAffinityTerm, ...],
        tolerations: tuple[Toleration, ...],
        created: float,
        status: str = PENDING,
        node: NodeInfo | None = None,
        gpus: tuple[int, ...] = (),
        gpu_portion: int = 0,
        prev_pipelined: tuple[str, tuple[int, ...]] | None = None,
        started: float | None = None,
        gpu_devices: int = 1,
        sub_group: str | None = None,
    ) -> None:
        self.uid, self.namespace, self.name, self.job = uid, namespace, name, job
        self.gpu_whole, self.gpu_frac, self.gpu_mem_mib, self.cpu, self.mem = gpu_whole, gpu_frac, gpu_mem_mib, cpu, mem
        self.sig, self.node_selector, self.affinity, self.tolerations = sig, node_selector, affinity, tolerations
        self.created, self.status, self.node, self.gpus = created, status, node, gpus
        self.gpu_portion, self.prev_pipelined, self.started = gpu_portion, prev_pipelined, started
        self.gpu_devices, self.sub_group = gpu_devices, sub_group

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def shape(self) -> tuple[int, int, int, int, int, int, int]:
        return (self.gpu_whole, self.gpu_frac, self.gpu_mem_mib, self.cpu, self.mem, self.sig, self.gpu_devices)

    @property
    def gpu_request(self) -> int:
        """GPU milli-devices asked for by count (whole GPUs, a fraction on each of its devices); a gpu-memory request
        is not counted here: its portion depends on the GPU (``memory_portion``)."""
        return self.gpu_whole * UNIT + self.gpu_frac * self.gpu_devices


def memory_portion(task: TaskInfo, node: NodeInfo) -> int:
    """The portion of one GPU of ``node`` that the task's GPU-memory request takes, rounded up: 0 without such a
    request, more than ``UNIT`` (never fits) where the node's GPU memory is unknown."""
    if not task.gpu_mem_mib:
        return 0
    if node.gpu_memory_mib <= 0:
        return UNIT + 1
    return -(-task.gpu_mem_mib * UNIT // node.gpu_memory_mib)


@dataclass(slots=True, eq=False, init=False)
class JobInfo:
    key: str
    namespace: str
    name: str
    uid: str
    queue_name: str
    queue: QueueInfo | None
    priority: int
    preemptible: bool
    min_member: int
    created: float
    tasks: list[TaskInfo] = field(default_factory=list)
    topology: TopologyConstraint | None = None
    changed: float = 0.0
    succeeded: int = 0
    group_missing: bool = False
    version: int = 0
    """Moved by every change of one of the job's tasks in a session (``Session.move``): the per-job memos below
    hold while it stands still."""
    key_memo: tuple[Any, ...] = ()
    """The memos of ``Session.job_key``, ``pending_of``, ``to_allocate``, ``job_class``, ``job_request`` and
    ``Hooks.queue_key_signature``, each with the version it was computed at (-1: none). They live on the job, so a
    job the fold left alone keeps them from cycle to cycle in a parked snapshot."""
    key_at: int = -1
    pending_memo: list[TaskInfo] = field(default_factory=list)
    pending_at: int = -1
    to_allocate_memo: list[TaskInfo] = field(default_factory=list)
    to_allocate_at: int = -1
    class_memo: JobClass | None = None
    class_at: int = -1
    request_memo: list[int] = field(default_factory=list)
    request_at: int = -1
    signature_memo: tuple[Hashable, ...] = ()
    signature_at: int = -1
    refused: str | None = None
    """Why a pod of the job cannot be served (``PodSpec.refused``: its DRA claims), as "pod: reason"; None: none."""
    sub_groups: tuple[tuple[str, int], ...] = ()
    """(name, minMember) of each subgroup that holds pods (``spec.subGroups`` without children): each one runs
    at least its minMember pods, or the job does not start."""
    sub_group_specs: tuple[SubGroupSpec, ...] = ()
    """The PodGroup's ``spec.subGroups`` when one of them has a topology constraint (read by the topology plugin)."""

    def __init__(
        self,
        key: str,
        namespace: str,
        name: str,
        uid: str,
        queue_name: str,
        queue: QueueInfo | None,
        priority: int,
        preemptible: bool,
        min_member: int,
        created: float,
        tasks: list[TaskInfo] | None = None,
        topology: TopologyConstraint | None = None,
        changed: float = 0.0,
        succeeded: int = 0,
        group_missing: bool = False,
        version: int = 0,
        sub_groups: tuple[tuple[str, int], ...] = (),
    ) -> None:
        self.key, self.namespace, self.name, self.uid, self.queue_name = key, namespace, name, uid, queue_name
        self.queue, self.priority, self.preemptible, self.min_member = queue, priority, preemptible, min_member
        self.created, self.tasks = created, [] if tasks is None else tasks
        self.topology, self.changed = topology, changed
        self.succeeded, self.group_missing, self.version = succeeded, group_missing, version
        self.sub_groups, self.refused, self.sub_group_specs = sub_groups, None, ()
        self.key_memo, self.key_at, self.pending_memo, self.pending_at = (), -1, [], -1
        self.to_allocate_memo, self.to_allocate_at = [], -1
        self.class_memo, self.class_at, self.request_memo, self.request_at = None, -1, [], -1
        self.signature_memo, self.signature_at = (), -1

    def active_count(self) -> int:
        return sum(1 for t in self.tasks if t.status in (RUNNING, ALLOCATED, PIPELINED))

    def pending_tasks(self) -> list[TaskInfo]:
        return [t for t in self.tasks if t.status == PENDING]

    def alive_active(self) -> tuple[int, int]:
        """The job's pods that are not releasing, and those of them that are not pending."""
        alive = active = 0
        for t in self.tasks:
            status = t.status
            if status != RELEASING:
                alive += 1
                if status != PENDING:
                    active += 1
        return alive, active


@dataclass(slots=True, eq=False)
class QueueInfo:
    name: str
    uid: str
    parent_name: str | None
    priority: int
    created: float
    quota: list[int]
    limit: list[int]
    weight: list[int]
    parent: QueueInfo | None = None
    children: list[QueueInfo] = field(default_factory=list)
    allocated: list[int] = field(default_factory=lambda: [0, 0, 0])
    allocated_np: list[int] = field(default_factory=lambda: [0, 0, 0])
    request: list[int] = field(default_factory=lambda: [0, 0, 0])
    fair_share: list[int] = field(default_factory=lambda: [0, 0, 0])
    share_cap: list[int] = field(default_factory=lambda: [0, 0, 0])
    version: int = 0
    preempt_min_runtime_s: float | None = None
    """This queue's own preempt min-runtime (``spec.preemptMinRuntime``, else ``spec.minRuntime``), None: unset."""
    reclaim_min_runtime_s: float | None = None
    """This queue's own reclaim min-runtime (``spec.reclaimMinRuntime``, else ``spec.minRuntime``), None: unset."""
    jobs: list[JobInfo] = field(default_factory=list)

    def add_allocated(self, gpu: int, cpu: int, mem: int, np_gpu: int, np_cpu: int, np_mem: int, versions: int) -> None:
        """Add to what this queue and its ancestors have allocated (``np_``: the non-preemptible part of it), and
        move their versions by ``versions``. The one place queue allocations are counted."""
        q: QueueInfo | None = self
        while q is not None:
            q.version += versions
            alloc = q.allocated
            alloc[GPU] += gpu
            alloc[CPU] += cpu
            alloc[MEM] += mem
            alloc = q.allocated_np
            alloc[GPU] += np_gpu
            alloc[CPU] += np_cpu
            alloc[MEM] += np_mem
            q = q.parent

    def add_request(self, request: list[int], sign: int) -> None:
        """Add (``sign`` -1: take back) a pending request to this queue and its ancestors."""
        for q in self.ancestry():
            for r in (GPU, CPU, MEM):
                q.request[r] += sign * request[r]

    def ancestry(self) -> list[QueueInfo]:
        """This queue and its ancestors, leaf first."""
        chain: list[QueueInfo] = []
        node: QueueInfo | None = self
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain
