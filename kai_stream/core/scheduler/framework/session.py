"""A session: the snapshot of one pool built from ``ClusterState``, sorted once, plus the hooks.

Nothing here mutates the ``ClusterState``; every working object is a fresh plain dataclass. Changes during
a cycle go through a ``Statement`` (which calls ``place``/``unplace``/``release``/``unrelease`` here and
keeps the undo log). Decisions are built by ``Statement.commit`` and collected in ``decisions``; pending
reasons are kept per task and emitted by ``close``.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence
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
    TopologyConstraint,
    stable_id,
)
from kai_stream.core.scheduler.framework.backoff import held_jobs
from kai_stream.core.scheduler.framework.hooks import Hooks, SortKey
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
    JobClass,
    JobInfo,
    NodeInfo,
    QueueInfo,
    TaskInfo,
)
from kai_stream.core.scheduler.framework.nodeindex import NodeIndex
from kai_stream.core.scheduler.timeshare import usage_shares
from kai_stream.core.state import NODE_MARK, ClusterState, pending_signature, predicate_counts

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.plugins import Plugin
    from kai_stream.core.scheduler.framework.statement import Statement

__all__ = [
    "CycleContext",
    "JobClass",
    "PendingInfo",
    "Session",
    "Snapshot",
    "open_session",
    "open_tracked_session",
    "park_session",
]



DEFAULT_PRIORITY_CLASS = "train"


@dataclass(frozen=True)
class CycleContext:
    pool: str
    input_offset: int
    ts: float
    config_hash: str
    code_version: str


@dataclass(init=False)
class PendingInfo:
    """Why a task stays pending; ``action`` is the action that gave the reason (stamped on the PodPending)."""

    code: PendingCode
    reason: str
    predicates: dict[str, int]
    details: dict[str, str]
    action: ActionName = "allocate"

    def __init__(
        self,
        code: PendingCode,
        reason: str,
        predicates: dict[str, int],
        details: dict[str, str],
        action: ActionName = "allocate",
    ) -> None:
        self.code, self.reason, self.predicates, self.details, self.action = code, reason, predicates, details, action


@dataclass(slots=True)
class _NodeBase:
    node: NodeInfo
    gpu_used: list[int]
    gpu_rel: list[int]
    gpu_pipe: list[int]
    host: tuple[int, int, int, int, int, int]
    free_whole: int
    releasing: list[TaskInfo] | None


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
    nominated: set[str] = field(default_factory=set)
    """Keys of the jobs with a task nominated when the session opened (``TaskInfo.prev_pipelined``: pipelined by an
    earlier cycle); kept by the snapshot, so reading it costs nothing per job."""
    state_id: int = 0
    _stamp: int = 0
    queue_epoch: int = 0
    """Bumped with every change of any ``QueueInfo.version``: while it stands still, no queue changed."""
    usage: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """Per leaf queue: its usage share of the cluster over the configured window (``timeshare.usage_shares``);
    empty unless ``config.usage_params`` is set."""
    _saved_tasks: dict[int, tuple[TaskInfo, str, NodeInfo | None, tuple[int, ...], int]] | None = None
    """When the session will be parked: each task's fields before the cycle first changed it (see ``park``)."""
    _saved_nodes: dict[int, _NodeBase] | None = None

    def __post_init__(self) -> None:
        self.index = NodeIndex(self)

    def _save(self, task: TaskInfo, node: NodeInfo) -> None:
        saved = self._saved_tasks
        assert saved is not None and self._saved_nodes is not None
        if id(task) not in saved:
            saved[id(task)] = (task, task.status, task.node, task.gpus, task.gpu_portion)
        if node.idx not in self._saved_nodes:
            rel = self.releasing_tasks.get(node.name)
            self._saved_nodes[node.idx] = _NodeBase(
                node,
                node.gpu_used[:],
                node.gpu_rel[:],
                node.gpu_pipe[:],
                (node.cpu_used, node.cpu_rel, node.cpu_pipe, node.mem_used, node.mem_rel, node.mem_pipe),
                node.free_whole,
                None if rel is None else rel[:],
            )

    # ------------------------------------------------------------------ state identity (for caches)

    def touch(self) -> None:
        self._stamp += 1
        self.state_id = self._stamp

    # ------------------------------------------------------------------ requests

    def task_request(self, task: TaskInfo) -> list[int]:
        """What a pending task asks for (a gpu-memory task counts as its fraction of the pool's largest GPU)."""
        gpu = task.gpu_whole * UNIT + task.gpu_frac * task.gpu_devices
        if task.gpu_mem_mib:
            gpu = -(-task.gpu_mem_mib * UNIT // self.reference_memory) if self.reference_memory else UNIT
        return [gpu, task.cpu, task.mem]

    def job_key(self, job: JobInfo) -> SortKey:
        """``hooks.pending_job_key``, memoised (the job-order hooks read the job's tasks and their statuses).

        The per-job memos (``job_key``, ``pending_of``, ``job_request``, ``job_class``; fields of the job) hold
        while the job's version stands still: what they read of the job (its tasks' statuses) changes only through
        ``_charge``, which moves that version. A job without a queue is not memoised. Each reads its memo inline (no
        shared helper): every action asks them of every pending job, several times."""
        if job.queue is None:
            return self.hooks.pending_job_key(job)
        if job.key_at == job.version:
            return job.key_memo
        key = self.hooks.pending_job_key(job)
        job.key_memo, job.key_at = key, job.version
        return key

    def pending_of(self, job: JobInfo) -> list[TaskInfo]:
        """``job.pending_tasks()``, memoised (see ``job_key``); the caller must not change the list."""
        if job.queue is None:
            return job.pending_tasks()
        if job.pending_at == job.version:
            return job.pending_memo
        pending = [t for t in job.tasks if t.status == PENDING]
        job.pending_memo, job.pending_at = pending, job.version
        return pending

    def to_allocate(self, job: JobInfo) -> list[TaskInfo]:
        """The pending tasks the job offers in one pass (KAI ``GetTasksToAllocate``), memoised like ``pending_of``:
        the ones still needed to reach minMember (and each subgroup's minMember), else one task (one per subgroup
        with pending tasks), in task order. The caller must not change the list."""
        if job.queue is None:
            return job.pending_tasks()
        if job.to_allocate_at == job.version:
            return job.to_allocate_memo
        chosen = _tasks_to_allocate(job, self.pending_of(job))
        job.to_allocate_memo, job.to_allocate_at = chosen, job.version
        return chosen

    def job_class(self, job: JobInfo) -> JobClass | None:
        """What the actions read of a job to decide it, besides its queue, identity and the session's state: its
        pending task shapes, minMember, pods not releasing and those of them active, and preemptibility. Jobs of
        one leaf with equal classes and the same queue-key signature, taken one after the other with nothing
        changed in between, get the same answer from allocate, consolidation and reclaim (see ``JobsByQueue``'s
        runs). None for a job whose answer reads more: a topology constraint (its job check tries domains), a
        nominated task (tried on its node first), or a missing PodGroup. Memoised like ``job_key``."""
        if job.queue is None:
            return None
        if job.class_at == job.version:
            return job.class_memo
        found: JobClass | None = None
        if (
            job.topology is None
            and not job.group_missing
            and not job.sub_groups
            and all(t.prev_pipelined is None for t in job.tasks)
        ):
            alive, active = job.alive_active()
            shapes = tuple([t.shape for t in self.pending_of(job)])
            found = (shapes, job.min_member, alive, active, job.preemptible)
        job.class_memo, job.class_at = found, job.version
        return found

    def job_request(self, job: JobInfo) -> list[int]:
        """The sum of the requests of the tasks the job offers in one pass (``to_allocate``), memoised (see
        ``job_key``); the caller must not change the list."""
        if job.queue is None:
            return self._job_request(job.pending_tasks())
        if job.request_at == job.version:
            return job.request_memo
        request = self._job_request(self.to_allocate(job))
        job.request_memo, job.request_at = request, job.version
        return request

    def _job_request(self, pending: list[TaskInfo]) -> list[int]:
        """The sum of ``task_request`` over ``pending`` (inlined: it is asked for every pending job each cycle)."""
        gpu = cpu = mem = 0
        reference = self.reference_memory
        for task in pending:
            if task.gpu_mem_mib:
                gpu += -(-task.gpu_mem_mib * UNIT // reference) if reference else UNIT
            else:
                gpu += task.gpu_whole * UNIT + task.gpu_frac * task.gpu_devices
            cpu += task.cpu
            mem += task.mem
        return [gpu, cpu, mem]

    # ------------------------------------------------------------------ resource bookkeeping

    def _charge(self, task: TaskInfo, sign: int) -> None:
        task.job.version += 1
        queue = task.job.queue
        if queue is None:
            return
        gpu = sign * len(task.gpus) * task.gpu_portion
        cpu = sign * task.cpu
        mem = sign * task.mem
        np = not task.job.preemptible
        self.queue_epoch += 1
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
        if self._saved_tasks is not None:
            self._save(task, node)
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
        if self._saved_tasks is not None:
            self._save(task, node)
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
        if self._saved_tasks is not None:
            self._save(task, node)
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
        if self._saved_tasks is not None:
            self._save(task, node)
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

    def dispose(self) -> None:
        """Let go of what the cycle built (memos, reasons, undo records, the index copy, the plugins), once the
        session is parked and nothing reads it any more.

        The cyclic collector is paused during a cycle and runs as soon as it is resumed, while the caller still
        holds the session: everything the session still reached would be traversed and promoted to an older
        generation, to be traversed again there before it is freed (the index and the plugins point back at the
        session, so it is not freed by reference counting alone). Emptied now, it is freed at once."""
        self.decisions = []
        self.pending = {}
        self.pending_jobs = []
        self.awaited = {}
        self.nominated = set()
        self.topologies = {}
        self._saved_tasks = None
        self._saved_nodes = None
        self.hooks = Hooks()
        self.index = NodeIndex(self)

    def discard(self) -> None:
        """Let go of a cold cycle's whole snapshot once the session is closed: ``dispose``, and cut the links that
        make every job, task and queue part of a reference cycle (a job and its tasks, a queue and its jobs, a
        queue and its children), so that the snapshot is freed by reference counting when the caller drops it.

        Otherwise the cyclic collector, resumed right after the cycle while the caller still holds the session,
        traverses and promotes the hundreds of thousands of objects of the snapshot (about 0.15 s at 50,000 pods),
        then traverses them again in the older generations before they are freed."""
        for job in self.jobs:
            job.tasks = []
        for q in self.queues.values():
            q.jobs, q.children, q.parent = [], [], None
        self.let_go()

    def let_go(self) -> None:
        """``dispose``, and drop this session's references to the snapshot's objects (which are left as they are):
        for a session nothing reads any more whose snapshot others may still use, such as a cold snapshot's base
        once its cycle's session is started (the base and its index refer to each other, so it would keep the
        whole snapshot alive until the next full collection)."""
        self.dispose()
        self.nodes, self.node_by_name, self.queues, self.roots = [], {}, {}, []
        self.jobs, self.tasks, self.releasing_tasks, self.pending_jobs = [], {}, {}, []

    # ------------------------------------------------------------------ pending reasons and output

    def set_pending(self, tasks: list[TaskInfo], info: PendingInfo) -> None:
        """Give each still pending task of ``tasks`` the reason ``info``. Per job, not per task: saturated cycles
        give a reason to every pending task of every job, in several actions."""
        reasons = self.pending
        for task in tasks:
            if task.status == PENDING:
                reasons[task.uid] = info

    def statement(self, action: str) -> Statement:
        from kai_stream.core.scheduler.framework.statement import Statement

        return Statement(self, action)

    def close(self) -> list[Decision]:
        """The cycle's decisions: committed operations in order, then pending reasons (unchanged ones omitted)."""
        out = list(self.decisions)
        signatures: dict[int, str] = {}  # per reason object: many tasks share one, and each outlives the loop
        counts: dict[int, str] = {}  # per predicates dict: reclaim's per-job reasons share allocate's, the same way
        for uid, info in self.pending.items():
            task = self.tasks[uid]
            if task.status != PENDING:
                continue
            signature = signatures.get(id(info))
            if signature is None:
                predicates = info.predicates
                count = counts.get(id(predicates))
                if count is None:
                    count = counts[id(predicates)] = predicate_counts(predicates)
                signature = signatures[id(info)] = pending_signature(info.code, info.reason, predicates, count)
            if self.last_pending.get(uid) == signature:
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
        preempt_min_runtime_s=spec.min_runtime_s if spec.preempt_min_runtime_s is None else spec.preempt_min_runtime_s,
        reclaim_min_runtime_s=spec.min_runtime_s if spec.reclaim_min_runtime_s is None else spec.reclaim_min_runtime_s,
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
    if task.gpu_devices > 1:
        fitting = sorted((-node.gpu_used[g], g) for g in range(node.gpu_count) if node.gpu_used[g] + portion <= UNIT)
        return tuple(sorted(g for _, g in fitting[: task.gpu_devices])), portion
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


def _tasks_to_allocate(job: JobInfo, pending: list[TaskInfo]) -> list[TaskInfo]:
    """``Session.to_allocate`` from the job's pending tasks (in task order).

    With subgroups (KAI ``GetTasksToAllocate`` over pod sets): while some subgroups are below their minMember,
    each of them offers what it still needs; once all are satisfied, one subgroup offers one task. Subgroups go
    in KAI's subgroup order: below the minimum first, then those with a minimum before those without, then the
    lower allocated / minMember (without a minimum: fewer allocated), then declared order. Tasks outside the
    declared subgroups form one subgroup with no minimum. The job's own minMember is then topped up from the
    remaining tasks."""
    if not job.sub_groups and (len(pending) <= 1 or len(job.tasks) <= job.min_member):
        return pending
    _, active = job.alive_active()
    need = job.min_member - active
    if not job.sub_groups:
        take = need if need > 0 else 1
        return pending if take >= len(pending) else pending[:take]
    minimum: dict[str | None, int] = dict(job.sub_groups)
    minimum.setdefault(None, 0)
    done = dict.fromkeys(minimum, 0)
    waiting: dict[str | None, list[TaskInfo]] = {name: [] for name in minimum}
    for task in job.tasks:
        group = task.sub_group if task.sub_group in minimum else None
        if task.status == PENDING:
            waiting[group].append(task)
        elif task.status != RELEASING:
            done[group] += 1
    below = [name for name in minimum if done[name] < minimum[name]]
    rank = {name: i for i, name in enumerate(minimum)}

    def order(name: str | None) -> tuple[int, int, float, int]:
        k, n = minimum[name], done[name]
        if n < k:
            return (0, 0, 0.0, rank[name])
        return (1, 0, n / k, rank[name]) if k > 0 else (1, 1, float(n), rank[name])

    picked: set[int] = set()
    groups = 0
    for name in sorted(minimum, key=order):
        if groups >= max(len(below), 1):
            break
        if not waiting[name]:
            continue
        k, n = minimum[name], done[name]
        picked.update(id(t) for t in waiting[name][: k - n if n < k else 1])
        groups += 1
    if len(picked) < need:
        picked.update(id(t) for t in [t for t in pending if id(t) not in picked][: need - len(picked)])
    return [t for t in pending if id(t) in picked]


def _pod_order(pod: PodSpec) -> tuple[float, str, str, str]:
    return (pod.created, pod.namespace, pod.name, pod.uid)


LABEL_TASK_PRIORITY = "kai.scheduler/task-priority"
_UNRANKED = (2, 0)


def _task_rank(labels: Mapping[str, str]) -> tuple[int, int]:
    """Where a pod's label ``kai.scheduler/task-priority`` puts it among its job's tasks (KAI's taskorder plugin):
    labelled with an integer first, higher first; then labelled with anything else; then unlabelled."""
    value = labels.get(LABEL_TASK_PRIORITY)
    if value is None:
        return _UNRANKED
    digits = value[1:] if value[:1] in ("+", "-") else value
    return (0, -int(value)) if digits.isascii() and digits.isdigit() else (1, 0)


def _task_order(task: TaskInfo) -> tuple[float, str, str, str]:
    return (task.created, task.namespace, task.name, task.uid)


def _job_order(job: JobInfo) -> tuple[float, str, str]:
    return (job.created, job.uid, job.key)


_Placed = tuple[TaskInfo, NodeInfo, "tuple[int, ...] | None", bool]
_NO_SIG: tuple[tuple[tuple[str, str], ...], tuple[object, ...], tuple[object, ...]] = ((), (), ())


class _JobBuilder:
    """Builds the job of one job key from its live managed pods, exactly as one scan of every pod in creation order
    would (the first of its pods in that order gives the job's attributes; tasks in (created, name, uid) order)."""

    __slots__ = ("config", "node_by_name", "nominated", "pool", "queues", "signatures", "state", "tasks")

    def __init__(
        self,
        state: ClusterState,
        config: SchedulerConfig,
        pool: str,
        queues: dict[str, QueueInfo],
        node_by_name: dict[str, NodeInfo],
        signatures: dict[object, int],
        tasks: dict[str, TaskInfo],
    ) -> None:
        self.state, self.config, self.pool = state, config, pool
        self.queues, self.node_by_name, self.signatures, self.tasks = queues, node_by_name, signatures, tasks
        self.nominated: set[str] = set()

    def build(
        self, pods: dict[str, PodSpec], placed: list[_Placed], first_fit: set[str]
    ) -> tuple[JobInfo, bool] | None:
        """The job (and whether it has a pending task); its running tasks go to ``placed`` and the nodes of those
        whose GPU indices are unknown (placed first fit, so in pod order) to ``first_fit``."""
        state = self.state
        assumed_of = state.assumed
        pod_groups = state.pod_groups
        node_by_name = self.node_by_name
        pool = self.pool
        chosen: list[tuple[PodSpec, str | None, tuple[int, ...] | None]] = []
        for pod in pods.values():
            assumed = assumed_of.get(pod.uid) if assumed_of else None
            node_name = pod.node_name
            if node_name:
                indices = pod.gpu_indices
            elif assumed is not None:
                node_name, indices = assumed.node or None, assumed.gpu_indices
            else:
                node_name, indices = None, None
            if node_name is not None:
                if node_name not in node_by_name:
                    continue
            else:
                group = pod_groups.get(f"{pod.namespace}/{pod.pod_group}") if pod.pod_group else None
                pod_pool = pod.pool if pod.pool != DEFAULT_POOL or group is None else group.pool
                if pod_pool != pool:
                    continue
            chosen.append((pod, node_name, indices))
        if not chosen:
            return None
        if len(chosen) > 1:
            chosen.sort(key=lambda c: (c[0].created, c[0].namespace, c[0].name, c[0].uid))
        first = chosen[0][0]
        if first.pod_group:
            group = pod_groups.get(f"{first.namespace}/{first.pod_group}")
            job_key, job_name = f"{first.namespace}/{first.pod_group}", first.pod_group
        else:
            group = None
            job_key, job_name = f"{first.namespace}/{first.name}", first.name
        priority_classes = state.priority_classes
        class_name = (group.priority_class if group else None) or first.priority_class
        pclass = priority_classes.get(class_name) if class_name else None
        if group is not None and group.priority is not None:
            priority = group.priority
        elif pclass is not None:
            priority = pclass.value
        elif first.priority is not None:
            priority = first.priority
        else:
            priority = priority_classes[DEFAULT_PRIORITY_CLASS].value
        explicit = group.preemptible if group is not None else None
        if explicit is None:
            explicit = first.preemptible
        queue_name = first.queue or (group.queue if group is not None else "") or self.config.default_queue
        leaf = self.queues.get(queue_name)
        job = JobInfo(
            job_key,
            first.namespace,
            job_name,
            (group.uid or job_key) if group is not None else first.uid,
            queue_name,
            leaf if leaf is not None and not leaf.children else None,
            priority,
            explicit if explicit is not None else priority < 100,
            group.min_member if group is not None else 1,
            group.created if group is not None else first.created,
            [],
            None,
            group.topology_constraint if group is not None else None,
            state.group_changed.get(job_key, 0.0),
            0,
            bool(first.pod_group) and group is None,
        )
        if group is not None and group.sub_groups:
            parents = {s.parent for s in group.sub_groups if s.parent}
            job.sub_groups = tuple((s.name, s.min_member) for s in group.sub_groups if s.name not in parents)
            if any(s.topology_constraint is not None for s in group.sub_groups):
                job.sub_group_specs = group.sub_groups
                if job.topology is None:
                    job.topology = TopologyConstraint()
        pending = nominated = False
        pipelined = state.pipelined
        evicting = state.evicting
        signatures = self.signatures
        tasks = self.tasks
        job_tasks = job.tasks
        for pod, node_name, indices in chosen:
            selector = pod.node_selector
            affinity = pod.affinity
            tolerations = pod.tolerations
            if selector or affinity or tolerations:
                sig_key: object = (tuple(sorted(selector.items())), affinity, tolerations)
            else:
                sig_key = _NO_SIG
            sig = signatures.get(sig_key)
            if sig is None:
                sig = signatures[sig_key] = len(signatures)
            gpu_frac = pod.gpu_fraction_milli or 0
            requests = pod.requests
            uid = pod.uid
            previous = pipelined.get(uid) if pipelined else None
            if previous is not None:
                nominated = True
            task = TaskInfo(
                uid,
                pod.namespace,
                pod.name,
                job,
                0 if gpu_frac else requests.gpu_milli // UNIT,
                gpu_frac,
                pod.gpu_memory_mib or 0,
                requests.cpu_milli,
                requests.memory,
                sig,
                selector,
                affinity,
                tolerations,
                pod.created,
                PENDING,
                None,
                (),
                0,
                None if previous is None else (previous.node, previous.gpu_indices),
                pod.started,
                pod.gpu_fraction_devices if gpu_frac else 1,
            )
            if pod.sub_group is not None:
                task.sub_group = pod.sub_group
            if pod.refused is not None and node_name is None:
                job.refused = f"pod {pod.namespace}/{pod.name}: {pod.refused}"
            job_tasks.append(task)
            tasks[uid] = task
            if node_name is not None:
                if not indices and (task.gpu_whole or gpu_frac or task.gpu_mem_mib):
                    first_fit.add(node_name)
                placed.append((task, node_by_name[node_name], indices, pod.terminating or uid in evicting))
            else:
                pending = True
        if nominated:
            self.nominated.add(job_key)
        if job.group_missing:
            job.min_member = len(job_tasks) + 1
        if len(job_tasks) > 1:
            ranks = {pod.uid: _task_rank(pod.labels) for pod, _, _ in chosen if LABEL_TASK_PRIORITY in pod.labels}
            if ranks:
                job_tasks.sort(key=lambda t: (ranks.get(t.uid, _UNRANKED), t.created, t.name, t.uid))
            else:
                job_tasks.sort(key=lambda t: (t.created, t.name, t.uid))
        return job, pending


def _place_running(
    ssn: Session, task: TaskInfo, node: NodeInfo, indices: tuple[int, ...] | None, releasing: bool
) -> None:
    if indices:
        count = len(node.healthy)
        gpus = tuple([g for g in indices if 0 <= g < count])
        portion = UNIT if task.gpu_whole else (task.gpu_frac or _memory_fraction(task, node))
    else:
        gpus, portion = _first_fit_gpus(node, task)
    used = node.gpu_used
    for g in gpus:
        used[g] += portion
    node.cpu_used += task.cpu
    node.mem_used += task.mem
    task.node, task.gpus, task.gpu_portion, task.status = node, gpus, portion, RUNNING
    ssn._charge(task, +1)
    if releasing:
        rel = node.gpu_rel
        for g in gpus:
            rel[g] += portion
        node.cpu_rel += task.cpu
        node.mem_rel += task.mem
        task.status = RELEASING
        ssn.releasing_tasks.setdefault(node.name, []).append(task)


def _place_all(ssn: Session, placed: list[_Placed]) -> None:
    """``_place_running`` for many tasks, charging each queue once with the sums (same totals and versions)."""
    charges: dict[int, tuple[QueueInfo, list[int]]] = {}
    releasing_tasks = ssn.releasing_tasks
    for task, node, indices, releasing in placed:
        if indices:
            count = len(node.healthy)
            gpus: tuple[int, ...]
            if len(indices) == 1 and 0 <= indices[0] < count:
                gpus = indices
            else:
                gpus = tuple([g for g in indices if 0 <= g < count])
            portion = UNIT if task.gpu_whole else (task.gpu_frac or _memory_fraction(task, node))
        else:
            gpus, portion = _first_fit_gpus(node, task)
        used = node.gpu_used
        for g in gpus:
            used[g] += portion
        cpu, mem = task.cpu, task.mem
        node.cpu_used += cpu
        node.mem_used += mem
        task.node, task.gpus, task.gpu_portion = node, gpus, portion
        if releasing:
            rel = node.gpu_rel
            for g in gpus:
                rel[g] += portion
            node.cpu_rel += cpu
            node.mem_rel += mem
            task.status = RELEASING
            releasing_tasks.setdefault(node.name, []).append(task)
        else:
            task.status = RUNNING
        job = task.job
        queue = job.queue
        if queue is not None:
            entry = charges.get(id(queue))
            if entry is None:
                entry = charges[id(queue)] = (queue, [0, 0, 0, 0, 0, 0, 0])
            acc = entry[1]
            gpu = len(gpus) * portion
            acc[0] += gpu
            acc[1] += cpu
            acc[2] += mem
            acc[6] += 1
            if not job.preemptible:
                acc[3] += gpu
                acc[4] += cpu
                acc[5] += mem
    if charges:
        ssn.queue_epoch += 1
    for queue, acc in charges.values():
        q: QueueInfo | None = queue
        while q is not None:
            q.version += acc[6]
            alloc = q.allocated
            alloc[GPU] += acc[0]
            alloc[CPU] += acc[1]
            alloc[MEM] += acc[2]
            alloc = q.allocated_np
            alloc[GPU] += acc[3]
            alloc[CPU] += acc[4]
            alloc[MEM] += acc[5]
            q = q.parent


def _unplace_running(ssn: Session, task: TaskInfo) -> None:
    """Undo ``_place_running`` (the node is out of the index meanwhile)."""
    node = task.node
    assert node is not None
    portion = task.gpu_portion
    used = node.gpu_used
    for g in task.gpus:
        used[g] -= portion
    node.cpu_used -= task.cpu
    node.mem_used -= task.mem
    ssn._charge(task, -1)
    if task.status == RELEASING:
        rel = node.gpu_rel
        for g in task.gpus:
            rel[g] -= portion
        node.cpu_rel -= task.cpu
        node.mem_rel -= task.mem
        listed = ssn.releasing_tasks[node.name]
        listed.remove(task)
        if not listed:
            del ssn.releasing_tasks[node.name]


def _add_request(ssn: Session, job: JobInfo, sign: int) -> None:
    if job.queue is None:
        return
    request = ssn._job_request(job.pending_tasks())
    for q in job.queue.ancestry():
        for r in (GPU, CPU, MEM):
            q.request[r] += sign * request[r]


@dataclass

@dataclass(eq=False)
class Snapshot:
    """One pool's session as it stands when opened, kept between cycles (``ClusterState.derived.parked``).

    ``base`` holds the persistent working objects; each cycle runs on a ``Session`` that shares them (with a copy
    of the node index) and records what it changes, and ``park`` puts those back. ``refresh`` then rebuilds only
    the jobs the fold marked dirty, so a cycle on nearly the same state costs what changed, not every pod.
    """

    pool: str
    config_hash: str
    base: Session
    job_by_key: dict[str, JobInfo]
    pending: set[str]
    builder: _JobBuilder
    first_fit: set[str]
    """Nodes whose tasks must all be placed in pod order (see ``_JobBuilder.build``): a change there needs a full
    build."""
    classes: dict[object, int]
    """Node class interner (``NodeInfo.class_id``: equal ids for nodes that every static predicate treats alike)."""
    queue_base: list[tuple[QueueInfo, list[int], list[int], list[int]]] = field(default_factory=list)

    @classmethod
    def build(cls, state: ClusterState, config: SchedulerConfig, pool: str, chash: str) -> Snapshot:
        derived = state.derived
        derived.sync(state.pods)
        classes: dict[object, int] = {}
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
        for pod in sorted(derived.unmanaged.values(), key=_pod_order):
            assumed = state.assumed.get(pod.uid)
            node_name = pod.node_name or (assumed.node if assumed is not None else None)
            indices = pod.gpu_indices if pod.node_name else (assumed.gpu_indices if assumed is not None else None)
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
        tasks: dict[str, TaskInfo] = {}
        signatures: dict[object, int] = {}
        builder = _JobBuilder(state, config, pool, queues, node_by_name, signatures, tasks)
        built: list[tuple[JobInfo, bool]] = []
        placed: list[_Placed] = []
        first_fit: set[str] = set()
        for pods in derived.by_job.values():
            one = builder.build(pods, placed, first_fit)
            if one is not None:
                built.append(one)
        base = Session(
            ctx=CycleContext(pool, state.offset, state.now, chash, ""),
            config=config,
            nodes=nodes,
            node_by_name=node_by_name,
            queues=queues,
            roots=roots,
            jobs=[],
            tasks=tasks,
            pending_jobs=[],
            total=[max(0, t) for t in total],
        )
        base.reference_memory = max((n.gpu_memory_mib for n in nodes), default=0)
        if first_fit:
            placed.sort(key=lambda p: _task_order(p[0]))
        _place_all(base, placed)
        if not first_fit:
            for listed in base.releasing_tasks.values():
                listed.sort(key=_task_order)
        built.sort(key=lambda b: _job_order(b[0]))
        pending: set[str] = set()
        succeeded = derived.succeeded
        for job, has_pending in built:
            if succeeded:
                job.succeeded = succeeded.get(job.key, 0)
            if job.queue is not None:
                job.queue.jobs.append(job)
            if has_pending:
                pending.add(job.key)
                _add_request(base, job, +1)
        base.jobs = [b[0] for b in built]
        for node in nodes:
            node.free_whole = node.count_free_whole()
        base.index.build()
        job_by_key = {job.key: job for job in base.jobs}
        return cls(pool, chash, base, job_by_key, pending, builder, first_fit, classes)

    # ------------------------------------------------------------------ one cycle

    def start(
        self,
        state: ClusterState,
        config: SchedulerConfig,
        plugins: Sequence[Plugin],
        *,
        input_offset: int,
        code_version: str,
        track: bool,
    ) -> Session:
        """A session on this snapshot for one cycle, ``plugins`` registering their hooks in order; ``track``: record
        changes so that ``park`` can undo them."""
        base = self.base
        ctx = CycleContext(self.pool, input_offset, state.now, self.config_hash, code_version)
        pending = self.pending
        if len(pending) * 8 > len(base.jobs):
            pending_jobs = [j for j in base.jobs if j.key in pending]
        else:
            pending_jobs = sorted((self.job_by_key[k] for k in pending), key=_job_order)
        held: list[tuple[JobInfo, str]] = []
        if state.bind_failures:
            pending_jobs, held = held_jobs(pending_jobs, base.tasks, state, config)
        ssn = Session(
            ctx=ctx,
            config=config,
            nodes=base.nodes,
            node_by_name=base.node_by_name,
            queues=base.queues,
            roots=base.roots,
            jobs=base.jobs,
            tasks=base.tasks,
            pending_jobs=pending_jobs,
            total=list(base.total),
            last_pending=state.last_pending,
            topologies={name: spec.levels for name, spec in sorted(state.topologies.items())},
            releasing_tasks=base.releasing_tasks,
            reference_memory=base.reference_memory,
        )
        ssn.index = base.index.clone(ssn)
        ssn.nominated = set(self.builder.nominated)
        for job, reason in held:
            ssn.set_pending(job.pending_tasks(), PendingInfo("BindBackoff", reason, {}, {}))
        if config.usage_params is not None:
            ssn.usage = usage_shares(state.usage, config.usage_params, state.now, config.default_queue)
        tasks = base.tasks
        for uid, preemptor in sorted(state.evicting_for.items()):
            victim = tasks.get(uid)
            if victim is not None and victim.node is not None:
                ssn.awaited[preemptor] = ssn.awaited.get(preemptor, 0) + 1
        if track:
            ssn._saved_tasks = {}
            ssn._saved_nodes = {}
            self.queue_base = [(q, q.allocated[:], q.allocated_np[:], q.request[:]) for q in base.queues.values()]
        for plugin in plugins:
            plugin.on_session_open(ssn)
        return ssn

    def park(self, ssn: Session) -> None:
        """Undo everything the cycle on ``ssn`` changed in the shared objects (``start`` with ``track``).

        A job whose tasks the cycle changed gets a new version (its memos of the cycle, fields of the job, held for
        the states the cycle left; its tasks are now back in the opening state).

        ``JobInfo.request_cache`` is cleared only on the jobs that had a pending task at open: a job without one
        has no pending task all cycle (only ``unplace`` makes a task pending again, and only tasks placed in the
        cycle), so its request is [0, 0, 0] whenever computed; when it gets one, the fold marks it dirty."""
        assert ssn._saved_tasks is not None and ssn._saved_nodes is not None
        for task, status, node, gpus, portion in ssn._saved_tasks.values():
            task.status, task.node, task.gpus, task.gpu_portion = status, node, gpus, portion
            task.job.version += 1
        releasing = self.base.releasing_tasks
        for saved in ssn._saved_nodes.values():
            node = saved.node
            node.gpu_used[:] = saved.gpu_used
            node.gpu_rel[:] = saved.gpu_rel
            node.gpu_pipe[:] = saved.gpu_pipe
            node.cpu_used, node.cpu_rel, node.cpu_pipe, node.mem_used, node.mem_rel, node.mem_pipe = saved.host
            node.free_whole = saved.free_whole
            if saved.releasing is None:
                releasing.pop(node.name, None)
            else:
                releasing[node.name] = saved.releasing
        for q, allocated, allocated_np, request in self.queue_base:
            q.allocated, q.allocated_np, q.request = allocated, allocated_np, request
            q.fair_share, q.share_cap = [0, 0, 0], [0, 0, 0]
        for job in ssn.pending_jobs:
            job.request_cache = None

    # ------------------------------------------------------------------ between cycles

    def _refresh_node(self, state: ClusterState, name: str) -> bool:
        """Take a node's new labels, taints, schedulability and GPU health; False when the pool's node set, its
        readiness or its capacity changed (those move totals, indices and task portions: full build)."""
        base = self.base
        node = base.node_by_name.get(name)
        spec = state.nodes.get(name)
        in_pool = spec is not None and spec.pool == self.pool
        if node is None:
            return not in_pool
        if not in_pool:
            return False
        fresh = _node_info(state, name, node.idx, self.classes)
        same = (fresh.gpu_count, fresh.cpu_alloc, fresh.mem_alloc, fresh.gpu_memory_mib, fresh.ready)
        if same != (node.gpu_count, node.cpu_alloc, node.mem_alloc, node.gpu_memory_mib, node.ready):
            return False
        base.index.remove(node)
        node.labels, node.taints, node.unschedulable = fresh.labels, fresh.taints, fresh.unschedulable
        node.class_id, node.healthy, node.gpu_faults = fresh.class_id, fresh.healthy, fresh.gpu_faults
        base.index.add(node)
        return True

    def refresh(self, state: ClusterState, config: SchedulerConfig, dirty: set[str]) -> bool:
        """Rebuild the jobs in ``dirty`` from the state; False when only a full build gives the same snapshot."""
        base = self.base
        derived = state.derived
        index = base.index
        first_fit = self.first_fit
        builder = self.builder
        builder.state, builder.config = state, config
        removed: list[JobInfo] = []
        added: list[JobInfo] = []
        keys = sorted(dirty)
        while keys and keys[0].startswith(NODE_MARK):
            if not self._refresh_node(state, keys.pop(0)[len(NODE_MARK) :]):
                return False
        for key in keys:
            old = self.job_by_key.pop(key, None)
            builder.nominated.discard(key)
            if old is not None:
                if first_fit and any(t.node is not None and t.node.name in first_fit for t in old.tasks):
                    return False
                if key in self.pending:
                    self.pending.discard(key)
                    _add_request(base, old, -1)
                for task in old.tasks:
                    node = task.node
                    if node is not None:
                        index.remove(node)
                        _unplace_running(base, task)
                        index.add(node)
                    del base.tasks[task.uid]
                removed.append(old)
            pods = derived.by_job.get(key)
            if not pods:
                continue
            placed: list[_Placed] = []
            new_first_fit: set[str] = set()
            built = builder.build(pods, placed, new_first_fit)
            if built is None:
                continue
            if new_first_fit or (first_fit and any(p[1].name in first_fit for p in placed)):
                return False
            job, has_pending = built
            job.succeeded = derived.succeeded.get(key, 0)
            self.job_by_key[key] = job
            added.append(job)
            for task, node, indices, releasing in placed:
                index.remove(node)
                _place_running(base, task, node, indices, releasing)
                if releasing:
                    listed = base.releasing_tasks[node.name]
                    listed.remove(task)
                    insort(listed, task, key=_task_order)
                index.add(node)
            if has_pending:
                self.pending.add(key)
                _add_request(base, job, +1)
        base.jobs = _replace_sorted(base.jobs, removed, added)
        queues = {id(j.queue): j.queue for j in removed + added if j.queue is not None}
        for q in queues.values():
            q.jobs = _replace_sorted(q.jobs, [j for j in removed if j.queue is q], [j for j in added if j.queue is q])
        return True


def _replace_sorted(jobs: list[JobInfo], removed: list[JobInfo], added: list[JobInfo]) -> list[JobInfo]:
    """``jobs`` (in ``_job_order``) without ``removed`` and with ``added``, still in order."""
    if len(removed) + len(added) <= 32:
        for old in removed:
            at = bisect_left(jobs, _job_order(old), key=_job_order)
            assert jobs[at] is old
            del jobs[at]
        for job in added:
            insort(jobs, job, key=_job_order)
        return jobs
    gone = {id(j) for j in removed}
    kept = [j for j in jobs if id(j) not in gone] if gone else jobs
    kept.extend(sorted(added, key=_job_order))
    kept.sort(key=_job_order)
    return kept


def open_session(
    state: ClusterState, config: SchedulerConfig, plugins: Sequence[Plugin], *, pool: str, input_offset: int,
    code_version: str,
) -> Session:
    """Build the sorted snapshot of ``pool`` from ``state`` and let ``plugins`` register hooks."""
    chash = config_hash(config)
    snapshot = Snapshot.build(state, config, pool, chash)
    session = snapshot.start(state, config, plugins, input_offset=input_offset, code_version=code_version, track=False)
    snapshot.base.let_go()
    return session


def open_tracked_session(
    state: ClusterState, config: SchedulerConfig, plugins: Sequence[Plugin], *, pool: str, input_offset: int,
    code_version: str,
) -> tuple[Session, Snapshot]:
    """``open_session`` reusing the pool's parked snapshot when the fold allows it; give the session back to
    ``park_session`` after the cycle (or drop the snapshot on failure)."""
    snapshot = kept_snapshot(state, config, pool=pool)
    ssn = snapshot.start(state, config, plugins, input_offset=input_offset, code_version=code_version, track=True)
    return ssn, snapshot


def kept_snapshot(state: ClusterState, config: SchedulerConfig, *, pool: str) -> Snapshot:
    """The pool's parked snapshot brought up to date with the fold (rebuilt when the fold does not allow it), taken
    out of ``state``: start a tracked session on it, or put it back with ``repark``."""
    chash = config_hash(config)
    derived = state.derived
    snapshot = derived.parked.pop(pool, None)
    dirty = derived.dirty.pop(pool, None)
    fresh = True
    if (
        isinstance(snapshot, Snapshot)
        and snapshot.config_hash == chash
        and dirty is not None
        and len(derived.indexed or ()) == len(state.pods)
        and len(dirty) * 2 <= len(snapshot.base.jobs) + 64
    ):
        fresh = not snapshot.refresh(state, config, dirty)
    if fresh:
        snapshot = Snapshot.build(state, config, pool, chash)
    assert isinstance(snapshot, Snapshot)
    return snapshot


def repark(state: ClusterState, snapshot: Snapshot) -> None:
    """Keep ``snapshot`` (from ``kept_snapshot``, no session started on it) for the pool's next cycle."""
    state.derived.parked[snapshot.pool] = snapshot
    state.derived.dirty[snapshot.pool] = set()


def park_session(state: ClusterState, ssn: Session, snapshot: Snapshot) -> None:
    """Undo the cycle's changes and keep the snapshot for the pool's next cycle on ``state``; ``ssn`` is spent
    (``Session.dispose``)."""
    snapshot.park(ssn)
    ssn.dispose()
    state.derived.parked[snapshot.pool] = snapshot
    state.derived.dirty[snapshot.pool] = set()
