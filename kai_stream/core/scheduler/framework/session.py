"""A session: the working set of one pool for one cycle (nodes, queues, jobs, tasks, sorted once), the hooks, and
the one primitive that moves a task's resources on its node and its queues.

The snapshot the session works on is built by ``framework/builder.py`` and kept between cycles by
``framework/reuse.py``; nothing here mutates the ``ClusterState``. Changes during a cycle go through a
``Statement`` (which calls ``place``/``unplace``/``release``/``unrelease`` here and keeps the undo log); each
moves resources only through ``move``. Decisions are built by ``Statement.commit`` and collected in
``decisions``; pending reasons are kept per task and emitted by ``close``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ActionName, Decision, PendingCode, PodPending, stable_id
from kai_stream.core.scheduler.framework.hooks import Hooks, SortKey
from kai_stream.core.scheduler.framework.info import (
    ALLOCATED,
    PENDING,
    PIPE,
    PIPELINED,
    REL,
    RELEASING,
    UNIT,
    USED,
    JobClass,
    JobInfo,
    NodeInfo,
    QueueInfo,
    TaskInfo,
)
from kai_stream.core.scheduler.framework.jobs import tasks_to_allocate
from kai_stream.core.scheduler.framework.nodeindex import NodeIndex
from kai_stream.core.state import pending_signature, predicate_counts

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.statement import Statement

__all__ = ["CycleContext", "JobClass", "PendingInfo", "Session"]


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
    _pending_by_leaf: dict[str, list[JobInfo]] | None = None
    """``pending_jobs`` per leaf queue name (``pending_in``), built when first asked."""
    _stamp: int = 0
    queue_epoch: int = 0
    """Bumped with every change of any ``QueueInfo.version``: while it stands still, no queue changed."""
    usage: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """Per leaf queue: its usage share of the cluster over the configured window (``timeshare.usage_shares``);
    empty unless ``config.usage_params`` is set."""
    ranking_override: dict[int, tuple[int, int, int]] | None = None
    """Per job (by ``id``): the request a simulation ranks it with while it orders jobs (``ranking_request``);
    None: no simulation is ordering jobs. Set and reset by its caller."""
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
        gpu = task.gpu_request
        if task.gpu_mem_mib:
            gpu = -(-task.gpu_mem_mib * UNIT // self.reference_memory) if self.reference_memory else UNIT
        return [gpu, task.cpu, task.mem]

    def job_key(self, job: JobInfo) -> SortKey:
        """``hooks.pending_job_key``, memoised (the job-order hooks read the job's tasks and their statuses).

        The per-job memos (``job_key``, ``pending_of``, ``job_request``, ``job_class``; fields of the job) hold
        while the job's version stands still: what they read of the job (its tasks' statuses) changes only through
        a charging ``move``, which moves that version. A job without a queue is not memoised. Each reads its memo
        inline (no shared helper): every action asks them of every pending job, several times."""
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

    def pending_in(self, leaf: QueueInfo) -> list[JobInfo]:
        """The jobs of ``pending_jobs`` in the leaf queue ``leaf``, in ``pending_jobs`` order (some may have no
        pending task left)."""
        by_leaf = self._pending_by_leaf
        if by_leaf is None:
            by_leaf = self._pending_by_leaf = {}
            for job in self.pending_jobs:
                if job.queue is not None:
                    by_leaf.setdefault(job.queue.name, []).append(job)
        return by_leaf.get(leaf.name, [])

    def to_allocate(self, job: JobInfo) -> list[TaskInfo]:
        """The pending tasks the job offers in one pass (KAI ``GetTasksToAllocate``), memoised like ``pending_of``:
        the ones still needed to reach minMember (and each subgroup's minMember), else one task (one per subgroup
        with pending tasks), in task order. The caller must not change the list."""
        if job.queue is None:
            return job.pending_tasks()
        if job.to_allocate_at == job.version:
            return job.to_allocate_memo
        chosen = tasks_to_allocate(job, self.pending_of(job))
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
            return self.tasks_request(job.pending_tasks())
        if job.request_at == job.version:
            return job.request_memo
        request = self.tasks_request(self.to_allocate(job))
        job.request_memo, job.request_at = request, job.version
        return request

    def ranking_request(self, job: JobInfo) -> tuple[int, int, int]:
        """The request the queue order ranks ``job`` with (the proportion plugin's queue keys): while a simulation
        orders jobs, what ``ranking_override`` gives it; else what it offers now (``job_request``), so a job that
        placed part of its tasks is ranked again with what it still asks for (KAI's
        ``GetTasksToAllocateInitResource``, whose cache ``invalidateTasksCache`` drops on every task status
        change)."""
        override = self.ranking_override
        if override is not None:
            request = override.get(id(job))
            if request is not None:
                return request
        gpu, cpu, mem = self.job_request(job)
        return gpu, cpu, mem

    def tasks_request(self, pending: list[TaskInfo]) -> list[int]:
        """The sum of ``task_request`` over ``pending`` (inlined: it is asked for every pending job each cycle)."""
        gpu = cpu = mem = 0
        reference = self.reference_memory
        for task in pending:
            if task.gpu_mem_mib:
                gpu += -(-task.gpu_mem_mib * UNIT // reference) if reference else UNIT
            else:
                gpu += task.gpu_request
            cpu += task.cpu
            mem += task.mem
        return [gpu, cpu, mem]

    # ------------------------------------------------------------------ resource bookkeeping

    def move(self, task: TaskInfo, bucket: int, sign: int, charge: int) -> None:
        """The one way a task's resources move in a session: add (``sign`` -1: take back) what ``task`` holds to
        ``bucket`` of its node (``NodeInfo.add``) and charge it ``charge`` times to its queue and the queue's
        ancestors (-1: uncharge; 0: leave them). A charge moves the job's version (its memos) and the queues'."""
        node = task.node
        assert node is not None
        node.add(task, bucket, sign)
        if charge:
            self._charge(task, charge)

    def _charge(self, task: TaskInfo, sign: int) -> None:
        job = task.job
        job.version += 1
        queue = job.queue
        if queue is None:
            return
        gpu = sign * len(task.gpus) * task.gpu_portion
        cpu = sign * task.cpu
        mem = sign * task.mem
        self.queue_epoch += 1
        if job.preemptible:
            queue.add_allocated(gpu, cpu, mem, 0, 0, 0, 1)
        else:
            queue.add_allocated(gpu, cpu, mem, gpu, cpu, mem, 1)

    def place(self, task: TaskInfo, node: NodeInfo, gpus: tuple[int, ...], portion: int, pipelined: bool) -> None:
        """Put a pending task on ``node`` (bound onto free capacity, or pipelined onto releasing capacity)."""
        if self._saved_tasks is not None:
            self._save(task, node)
        self.index.remove(node)
        task.status = PIPELINED if pipelined else ALLOCATED
        task.node, task.gpus, task.gpu_portion = node, gpus, portion
        self.move(task, PIPE if pipelined else USED, +1, +1)
        self.index.add(node)
        self.touch()

    def unplace(self, task: TaskInfo) -> None:
        """Undo ``place``."""
        node = task.node
        assert node is not None
        if self._saved_tasks is not None:
            self._save(task, node)
        self.index.remove(node)
        self.move(task, PIPE if task.status == PIPELINED else USED, -1, -1)
        self.index.add(node)
        task.status, task.node, task.gpus, task.gpu_portion = PENDING, None, (), 0
        self.touch()

    def release(self, task: TaskInfo) -> str:
        """Mark a running task as releasing (evicted): its resources become pipelinable. Returns old status.

        A task pipelined in this session (KAI's active-allocated ``Pipelined``) gives up its reservation instead:
        the capacity it waited for is released again, and it holds nothing while releasing."""
        node = task.node
        assert node is not None
        if self._saved_tasks is not None:
            self._save(task, node)
        previous = task.status
        index = self.index
        if previous == PIPELINED:
            index.remove(node)
            self.move(task, PIPE, -1, -1)
            index.add(node)
            task.status = RELEASING
            self.touch()
            return previous
        placed_same = index.release_keeps_entries(node, task.gpus)
        if not placed_same:
            index.remove(node)
        self.move(task, REL, +1, -1)
        if placed_same:
            index.refresh_releasing(node)
        else:
            index.add(node)
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
        if previous == PIPELINED:
            index.remove(node)
            self.move(task, PIPE, +1, +1)
            index.add(node)
            task.status = previous
            self.touch()
            return
        placed_same = index.release_keeps_entries(node, task.gpus)
        if not placed_same:
            index.remove(node)
        self.move(task, REL, -1, +1)
        if placed_same:
            index.refresh_releasing(node)
        else:
            index.add(node)
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
        self._pending_by_leaf = None
        self.ranking_override = None
        self.awaited = {}
        self.nominated = set()
        self.topologies = {}
        self._saved_tasks = None
        self._saved_nodes = None
        self.hooks = Hooks()
        self.index = NodeIndex(self)

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
