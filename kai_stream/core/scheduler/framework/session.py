"""A session: the snapshot of one pool built from ``ClusterState``, sorted once, plus the hooks.

Nothing here mutates the ``ClusterState``; every working object is a fresh plain dataclass. Changes during
a cycle go through a ``Statement`` (which calls ``place``/``unplace``/``release``/``unrelease`` here and
keeps the undo log). Decisions are built by ``Statement.commit`` and collected in ``decisions``; pending
reasons are kept per task and emitted by ``close``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kai_stream.core.config import SchedulerConfig, config_hash
from kai_stream.core.events import (
    DEFAULT_POOL,
    ActionName,
    Decision,
    PendingCode,
    PodPending,
    PodSpec,
    QueueResource,
    QueueSpec,
    stable_id,
)
from kai_stream.core.scheduler.framework.hooks import Hooks
from kai_stream.core.scheduler.framework.info import (
    ALLOCATED,
    CPU,
    GPU,
    MEM,
    PENDING,
    PIPELINED,
    RELEASING,
    RUNNING,
    UNIT,
    JobInfo,
    NodeInfo,
    QueueInfo,
    TaskInfo,
)
from kai_stream.core.scheduler.framework.nodeindex import NodeIndex
from kai_stream.core.scheduler.framework.plugins import registry
from kai_stream.core.state import ClusterState, pending_signature

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.statement import Statement

__all__ = ["CycleContext", "PendingInfo", "Session", "open_session"]

DEFAULT_PRIORITY_CLASS = "train"


@dataclass(frozen=True)
class CycleContext:
    pool: str
    input_offset: int
    ts: float
    config_hash: str
    code_version: str


@dataclass
class PendingInfo:
    """Why a task stays pending; ``action`` is the action that gave the reason (stamped on the PodPending)."""

    code: PendingCode
    reason: str
    predicates: dict[str, int]
    details: dict[str, str]
    action: ActionName = "allocate"


@dataclass(eq=False)
class Session:
    ctx: CycleContext
    config: SchedulerConfig
    nodes: list[NodeInfo]
    node_by_name: dict[str, NodeInfo]
    queues: dict[str, QueueInfo]
    roots: list[QueueInfo]
    jobs: list[JobInfo]
    tasks: dict[str, TaskInfo]
    pending_jobs: list[JobInfo]
    """The jobs (in ``jobs`` order) with a pending task when the session opened. Only a task pending at open can
    be pending later in the cycle (``unplace`` undoes a placement of one; evictions make tasks releasing), so
    actions looking for pending work scan these instead of every job."""
    total: list[int]
    hooks: Hooks = field(default_factory=Hooks)
    index: NodeIndex = field(init=False)
    decisions: list[Decision] = field(default_factory=list)
    pending: dict[str, PendingInfo] = field(default_factory=dict)
    last_pending: dict[str, str] = field(default_factory=dict)
    releasing_tasks: dict[str, list[TaskInfo]] = field(default_factory=dict)
    reference_memory: int = 0
    topologies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    awaited: dict[str, int] = field(default_factory=dict)
    """Per preemptor job key: how many pods evicted for it (in an earlier cycle) are still releasing."""
    state_id: int = 0
    _stamp: int = 0

    def __post_init__(self) -> None:
        self.index = NodeIndex(self)

    # ------------------------------------------------------------------ state identity (for caches)

    def touch(self) -> None:
        self._stamp += 1
        self.state_id = self._stamp

    # ------------------------------------------------------------------ requests

    def task_request(self, task: TaskInfo) -> list[int]:
        """What a pending task asks for (a gpu-memory task counts as its fraction of the pool's largest GPU)."""
        gpu = task.gpu_whole * UNIT + task.gpu_frac
        if task.gpu_mem_mib:
            gpu = -(-task.gpu_mem_mib * UNIT // self.reference_memory) if self.reference_memory else UNIT
        return [gpu, task.cpu, task.mem]

    def job_request(self, job: JobInfo) -> list[int]:
        total = [0, 0, 0]
        for task in job.tasks:
            if task.status == PENDING:
                gpu, cpu, mem = self.task_request(task)
                total[GPU] += gpu
                total[CPU] += cpu
                total[MEM] += mem
        return total

    # ------------------------------------------------------------------ resource bookkeeping

    def _charge(self, task: TaskInfo, sign: int) -> None:
        queue = task.job.queue
        if queue is None:
            return
        gpu = sign * len(task.gpus) * task.gpu_portion
        cpu = sign * task.cpu
        mem = sign * task.mem
        np = not task.job.preemptible
        q: QueueInfo | None = queue
        while q is not None:
            q.version += 1
            alloc = q.allocated
            alloc[GPU] += gpu
            alloc[CPU] += cpu
            alloc[MEM] += mem
            if np:
                alloc = q.allocated_np
                alloc[GPU] += gpu
                alloc[CPU] += cpu
                alloc[MEM] += mem
            q = q.parent

    def place(self, task: TaskInfo, node: NodeInfo, gpus: tuple[int, ...], portion: int, pipelined: bool) -> None:
        """Put a pending task on ``node`` (bound onto free capacity, or pipelined onto releasing capacity)."""
        self.index.remove(node)
        if pipelined:
            for g in gpus:
                node.gpu_pipe[g] += portion
            node.cpu_pipe += task.cpu
            node.mem_pipe += task.mem
        else:
            for g in gpus:
                node.gpu_used[g] += portion
            node.cpu_used += task.cpu
            node.mem_used += task.mem
        self.index.add(node)
        task.status = PIPELINED if pipelined else ALLOCATED
        task.node, task.gpus, task.gpu_portion = node, gpus, portion
        self._charge(task, +1)
        self.touch()

    def unplace(self, task: TaskInfo) -> None:
        """Undo ``place``."""
        node = task.node
        assert node is not None
        self._charge(task, -1)
        self.index.remove(node)
        if task.status == PIPELINED:
            for g in task.gpus:
                node.gpu_pipe[g] -= task.gpu_portion
            node.cpu_pipe -= task.cpu
            node.mem_pipe -= task.mem
        else:
            for g in task.gpus:
                node.gpu_used[g] -= task.gpu_portion
            node.cpu_used -= task.cpu
            node.mem_used -= task.mem
        self.index.add(node)
        task.status, task.node, task.gpus, task.gpu_portion = PENDING, None, (), 0
        self.touch()

    def release(self, task: TaskInfo) -> str:
        """Mark a running task as releasing (evicted): its resources become pipelinable. Returns old status."""
        node = task.node
        assert node is not None
        previous = task.status
        index = self.index
        placed_same = index.release_keeps_entries(node, task.gpus)
        if not placed_same:
            index.remove(node)
        for g in task.gpus:
            node.gpu_rel[g] += task.gpu_portion
        node.cpu_rel += task.cpu
        node.mem_rel += task.mem
        if placed_same:
            index.refresh_releasing(node)
        else:
            index.add(node)
        self._charge(task, -1)
        task.status = RELEASING
        self.releasing_tasks.setdefault(node.name, []).append(task)
        self.touch()
        return previous

    def unrelease(self, task: TaskInfo, previous: str) -> None:
        """Undo ``release``."""
        node = task.node
        assert node is not None
        index = self.index
        placed_same = index.release_keeps_entries(node, task.gpus)
        if not placed_same:
            index.remove(node)
        for g in task.gpus:
            node.gpu_rel[g] -= task.gpu_portion
        node.cpu_rel -= task.cpu
        node.mem_rel -= task.mem
        if placed_same:
            index.refresh_releasing(node)
        else:
            index.add(node)
        self._charge(task, +1)
        task.status = previous
        self.releasing_tasks[node.name].remove(task)
        self.touch()

    # ------------------------------------------------------------------ pending reasons and output

    def set_pending(self, task: TaskInfo, info: PendingInfo) -> None:
        self.pending[task.uid] = info

    def statement(self, action: str) -> Statement:
        from kai_stream.core.scheduler.framework.statement import Statement

        return Statement(self, action)

    def close(self) -> list[Decision]:
        """The cycle's decisions: committed operations in order, then pending reasons (unchanged ones omitted)."""
        out = list(self.decisions)
        for uid, info in self.pending.items():
            task = self.tasks[uid]
            if task.status != PENDING:
                continue
            job = task.job
            decision = PodPending(
                decision_id=stable_id(self.ctx.pool, str(self.ctx.input_offset), uid, "PodPending"),
                ts=self.ctx.ts,
                pool=self.ctx.pool,
                input_offset=self.ctx.input_offset,
                config_hash=self.ctx.config_hash,
                code_version=self.ctx.code_version,
                action=info.action,
                namespace=task.namespace,
                name=task.name,
                uid=uid,
                job=job.key,
                queue=job.queue_name,
                reason=info.reason,
                code=info.code,
                predicates=info.predicates,
                details=info.details,
            )
            if self.last_pending.get(uid) == pending_signature(decision):
                continue
            out.append(decision)
        return out


# ---------------------------------------------------------------------- building a session


def _queue_info(spec: QueueSpec) -> QueueInfo:
    res: tuple[QueueResource, QueueResource, QueueResource] = (
        spec.resources.gpu,
        spec.resources.cpu,
        spec.resources.memory,
    )
    return QueueInfo(
        name=spec.name,
        uid=spec.uid or spec.name,
        parent_name=spec.parent,
        priority=spec.priority,
        created=spec.created,
        quota=[x.quota for x in res],
        limit=[x.limit for x in res],
        weight=[x.over_quota_weight for x in res],
        min_runtime_s=spec.min_runtime_s,
    )


def _build_queues(state: ClusterState) -> tuple[dict[str, QueueInfo], list[QueueInfo]]:
    queues = {name: _queue_info(state.queues[name]) for name in sorted(state.queues)}
    roots: list[QueueInfo] = []
    for q in queues.values():
        parent = queues.get(q.parent_name) if q.parent_name else None
        seen = {q.name}
        walk = parent
        while walk is not None and walk.name not in seen:
            seen.add(walk.name)
            walk = queues.get(walk.parent_name) if walk.parent_name else None
        if parent is None or walk is not None:
            roots.append(q)
        else:
            q.parent = parent
            parent.children.append(q)
    key = lambda q: (q.created, q.uid, q.name)  # noqa: E731
    roots.sort(key=key)
    for q in queues.values():
        q.children.sort(key=key)
    return queues, roots


def _interner() -> dict[object, int]:
    return {}


def _node_info(state: ClusterState, spec_name: str, idx: int, classes: dict[object, int]) -> NodeInfo:
    spec = state.nodes[spec_name]
    count = spec.allocatable.gpu_milli // UNIT
    healthy = [True] * count
    faults: dict[int, str] = {}
    for device in state.gpus.get(spec.name, ()):
        if 0 <= device.index < count:
            healthy[device.index] = device.healthy
            if not device.healthy:
                uuid = f" ({device.uuid})" if device.uuid else ""
                faults[device.index] = f"GPU {device.index}{uuid}: {device.reason or 'unhealthy'}"
    gpu_memory = spec.gpu_memory_mib
    if not gpu_memory:
        known = [d.memory_mib for d in state.gpus.get(spec.name, ()) if d.memory_mib]
        gpu_memory = min(known) if known else 0
    labels = tuple(sorted(spec.labels.items()))
    class_key = (labels, spec.taints, spec.ready, spec.unschedulable, count, gpu_memory)
    class_id = classes.setdefault(class_key, len(classes))
    return NodeInfo(
        name=spec.name,
        idx=idx,
        labels=spec.labels,
        taints=spec.taints,
        ready=spec.ready,
        unschedulable=spec.unschedulable,
        class_id=class_id,
        gpu_memory_mib=gpu_memory,
        healthy=healthy,
        gpu_used=[0] * count,
        gpu_rel=[0] * count,
        gpu_pipe=[0] * count,
        cpu_alloc=spec.allocatable.cpu_milli,
        mem_alloc=spec.allocatable.memory,
        gpu_faults=tuple(faults[g] for g in sorted(faults)),
    )


def _job_identity(pod: PodSpec) -> tuple[str, str]:
    if pod.pod_group:
        return f"{pod.namespace}/{pod.pod_group}", pod.pod_group
    return f"{pod.namespace}/{pod.name}", pod.name


def _first_fit_gpus(node: NodeInfo, task: TaskInfo) -> tuple[tuple[int, ...], int]:
    """GPUs for an already-running task whose indices are unknown (deterministic: lowest fitting index)."""
    if task.gpu_whole:
        free = [g for g in range(node.gpu_count) if node.gpu_used[g] == 0]
        return tuple(free[: task.gpu_whole]), UNIT
    portion = task.gpu_frac or _memory_fraction(task, node)
    if portion <= 0:
        return (), 0
    best = -1
    for g in range(node.gpu_count):
        if node.gpu_used[g] + portion <= UNIT and (best < 0 or node.gpu_used[g] > node.gpu_used[best]):
            best = g
    return ((best,) if best >= 0 else ()), portion


def _memory_fraction(task: TaskInfo, node: NodeInfo) -> int:
    if not task.gpu_mem_mib:
        return 0
    if node.gpu_memory_mib <= 0:
        return UNIT + 1
    return -(-task.gpu_mem_mib * UNIT // node.gpu_memory_mib)


def open_session(
    state: ClusterState, config: SchedulerConfig, *, pool: str, input_offset: int, code_version: str
) -> Session:
    """Build the sorted snapshot of ``pool`` from ``state`` and let the configured plugins register hooks."""
    ctx = CycleContext(pool, input_offset, state.now, config_hash(config), code_version)
    classes = _interner()
    node_names = sorted(n for n, spec in state.nodes.items() if spec.pool == pool)
    nodes = [_node_info(state, name, i, classes) for i, name in enumerate(node_names)]
    node_by_name = {n.name: n for n in nodes}
    queues, roots = _build_queues(state)
    total = [0, 0, 0]
    for n in nodes:
        if n.ready:
            total[GPU] += n.gpu_count * UNIT
            total[CPU] += n.cpu_alloc
            total[MEM] += n.mem_alloc

    jobs: dict[str, JobInfo] = {}
    tasks: dict[str, TaskInfo] = {}
    signatures: dict[object, int] = {}
    placed: list[tuple[TaskInfo, NodeInfo, tuple[int, ...] | None, str]] = []
    priority_classes = state.priority_classes

    succeeded: dict[str, int] = {}
    with_pending: set[str] = set()
    for pod in sorted(state.pods.values(), key=lambda p: (p.created, p.namespace, p.name, p.uid)):
        if pod.phase in ("Succeeded", "Failed"):
            if pod.phase == "Succeeded":
                key = _job_identity(pod)[0]
                succeeded[key] = succeeded.get(key, 0) + 1
            continue
        assumed = state.assumed.get(pod.uid)
        node_name = pod.node_name or (assumed.node if assumed is not None else None)
        indices = pod.gpu_indices if pod.node_name else (assumed.gpu_indices if assumed is not None else None)
        if not pod.managed:
            node = node_by_name.get(node_name or "")
            if node is not None:
                node.cpu_used += pod.requests.cpu_milli
                node.mem_used += pod.requests.memory
                if node.ready:
                    total[CPU] -= pod.requests.cpu_milli
                    total[MEM] -= pod.requests.memory
                whole = pod.requests.gpu_milli // UNIT
                free = [g for g in range(node.gpu_count) if node.gpu_used[g] == 0]
                for g in indices or tuple(free[:whole]):
                    if 0 <= g < node.gpu_count:
                        node.gpu_used[g] = UNIT
                        if node.ready:
                            total[GPU] -= UNIT
            continue
        group = state.pod_groups.get(f"{pod.namespace}/{pod.pod_group}") if pod.pod_group else None
        pod_pool = pod.pool if pod.pool != DEFAULT_POOL or group is None else group.pool
        if node_name is not None:
            if node_name not in node_by_name:
                continue
        elif pod_pool != pool:
            continue
        job_key, job_name = _job_identity(pod)
        job = jobs.get(job_key)
        if job is None:
            class_name = (group.priority_class if group else None) or pod.priority_class
            pclass = priority_classes.get(class_name) if class_name else None
            if group is not None and group.priority is not None:
                priority = group.priority
            elif pclass is not None:
                priority = pclass.value
            elif pod.priority is not None:
                priority = pod.priority
            else:
                priority = priority_classes[DEFAULT_PRIORITY_CLASS].value
            explicit = group.preemptible if group is not None else None
            if explicit is None:
                explicit = pod.preemptible
            queue_name = pod.queue or (group.queue if group is not None else "") or config.default_queue
            leaf = queues.get(queue_name)
            job = JobInfo(
                key=job_key,
                namespace=pod.namespace,
                name=job_name,
                uid=(group.uid or job_key) if group is not None else pod.uid,
                queue_name=queue_name,
                queue=leaf if leaf is not None and not leaf.children else None,
                priority=priority,
                preemptible=explicit if explicit is not None else priority < 100,
                min_member=group.min_member if group is not None else 1,
                created=group.created if group is not None else pod.created,
                topology=group.topology_constraint if group is not None else None,
                changed=state.group_changed.get(job_key, 0.0),
                group_missing=bool(pod.pod_group) and group is None,
            )
            jobs[job_key] = job
        sig_key = (tuple(sorted(pod.node_selector.items())), pod.affinity, pod.tolerations)
        sig = signatures.setdefault(sig_key, len(signatures))
        gpu_frac = pod.gpu_fraction_milli or 0
        task = TaskInfo(
            uid=pod.uid,
            namespace=pod.namespace,
            name=pod.name,
            job=job,
            gpu_whole=0 if gpu_frac else pod.requests.gpu_milli // UNIT,
            gpu_frac=gpu_frac,
            gpu_mem_mib=pod.gpu_memory_mib or 0,
            cpu=pod.requests.cpu_milli,
            mem=pod.requests.memory,
            sig=sig,
            node_selector=pod.node_selector,
            affinity=pod.affinity,
            tolerations=pod.tolerations,
            created=pod.created,
            started=pod.started,
        )
        previous = state.pipelined.get(pod.uid)
        if previous is not None:
            task.prev_pipelined = (previous.node, previous.gpu_indices)
        job.tasks.append(task)
        tasks[pod.uid] = task
        if node_name is not None:
            releasing = pod.terminating or pod.uid in state.evicting
            placed.append((task, node_by_name[node_name], indices, RELEASING if releasing else RUNNING))
        else:
            with_pending.add(job_key)

    ssn = Session(
        ctx=ctx,
        config=config,
        nodes=nodes,
        node_by_name=node_by_name,
        queues=queues,
        roots=roots,
        jobs=[],
        tasks=tasks,
        pending_jobs=[],
        total=[max(0, t) for t in total],
        last_pending=state.last_pending,
        topologies={name: spec.levels for name, spec in sorted(state.topologies.items())},
    )
    for task, node, indices, status in placed:
        if indices:
            count = len(node.healthy)
            gpus = tuple([g for g in indices if 0 <= g < count])
            portion = UNIT if task.gpu_whole else (task.gpu_frac or _memory_fraction(task, node))
        else:
            gpus, portion = _first_fit_gpus(node, task)
        for g in gpus:
            node.gpu_used[g] += portion
        node.cpu_used += task.cpu
        node.mem_used += task.mem
        task.node, task.gpus, task.gpu_portion, task.status = node, gpus, portion, RUNNING
        ssn._charge(task, +1)
        if status == RELEASING:
            for g in gpus:
                node.gpu_rel[g] += portion
            node.cpu_rel += task.cpu
            node.mem_rel += task.mem
            task.status = RELEASING
            ssn.releasing_tasks.setdefault(node.name, []).append(task)

    for uid, preemptor in sorted(state.evicting_for.items()):
        victim = tasks.get(uid)
        if victim is not None and victim.node is not None:
            ssn.awaited[preemptor] = ssn.awaited.get(preemptor, 0) + 1
    job_list = sorted(jobs.values(), key=lambda j: (j.created, j.uid, j.key))
    ssn.reference_memory = max((n.gpu_memory_mib for n in nodes), default=0)
    for job in job_list:
        if job.group_missing:
            job.min_member = len(job.tasks) + 1
        job.succeeded = succeeded.get(job.key, 0)
        if len(job.tasks) > 1:
            job.tasks.sort(key=lambda t: (t.created, t.name, t.uid))
        if job.key in with_pending:
            ssn.pending_jobs.append(job)
        if job.queue is None:
            continue
        job.queue.jobs.append(job)
        if job.key in with_pending:
            request = ssn.job_request(job)
            for q in job.queue.ancestry():
                for r in (GPU, CPU, MEM):
                    q.request[r] += request[r]
    ssn.jobs = job_list
    for node in nodes:
        node.free_whole = node.count_free_whole()
    ssn.index.build()
    plugins = registry()
    for name in config.plugins:
        plugins[name]().on_session_open(ssn)
    return ssn
