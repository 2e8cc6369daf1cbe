"""The pure snapshot builder: one pool's working objects (nodes, queues, jobs, tasks) built from ``ClusterState``.

``build_snapshot`` makes the whole snapshot (a ``Session`` holding it, the base that cycles start from); ``JobBuilder``
builds the job of one job key from its live pods, so that snapshot reuse (``framework/reuse.py``) rebuilds only
the jobs that changed and gets what a full build would. What a job means (priority, preemptibility, queue,
task order) is asked of ``framework/jobs.py``. Nothing here mutates the ``ClusterState``.
"""

from __future__ import annotations

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import DEFAULT_POOL, PodSpec, QueueResource, QueueSpec, TopologyConstraint
from kai_stream.core.scheduler.framework.info import (
    CPU,
    GPU,
    MEM,
    PENDING,
    REL,
    RELEASING,
    RUNNING,
    UNIT,
    USED,
    JobInfo,
    NodeInfo,
    QueueInfo,
    TaskInfo,
    memory_portion,
)
from kai_stream.core.scheduler.framework.jobs import (
    LABEL_TASK_PRIORITY,
    UNRANKED,
    job_order,
    job_preemptible,
    job_priority,
    job_queue,
    sub_groups,
    task_order,
    task_rank,
)
from kai_stream.core.scheduler.framework.session import CycleContext, Session
from kai_stream.core.state import ClusterState

__all__ = [
    "Built",
    "JobBuilder",
    "Placed",
    "add_request",
    "build_queues",
    "build_snapshot",
    "node_info",
    "place_running",
    "queue_info",
    "unplace_running",
]

def queue_info(spec: QueueSpec) -> QueueInfo:
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


def build_queues(state: ClusterState) -> tuple[dict[str, QueueInfo], list[QueueInfo]]:
    queues = {name: queue_info(state.queues[name]) for name in sorted(state.queues)}
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


def node_info(state: ClusterState, spec_name: str, idx: int, classes: dict[object, int]) -> NodeInfo:
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


def _first_fit_gpus(node: NodeInfo, task: TaskInfo) -> tuple[tuple[int, ...], int]:
    """GPUs for an already-running task whose indices are unknown (deterministic: lowest fitting index)."""
    if task.gpu_whole:
        free = [g for g in range(node.gpu_count) if node.gpu_used[g] == 0]
        return tuple(free[: task.gpu_whole]), UNIT
    portion = task.gpu_frac or memory_portion(task, node)
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


def _pod_order(pod: PodSpec) -> tuple[float, str, str, str]:
    return (pod.created, pod.namespace, pod.name, pod.uid)


Placed = tuple[TaskInfo, NodeInfo, "tuple[int, ...] | None", bool]
_NO_SIG: tuple[tuple[tuple[str, str], ...], tuple[object, ...], tuple[object, ...]] = ((), (), ())


class JobBuilder:
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
        self, pods: dict[str, PodSpec], placed: list[Placed], first_fit: set[str]
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
        priority = job_priority(group, first, state.priority_classes)
        queue_name, leaf = job_queue(group, first, self.config.default_queue, self.queues)
        job = JobInfo(
            job_key,
            first.namespace,
            job_name,
            (group.uid or job_key) if group is not None else first.uid,
            queue_name,
            leaf,
            priority,
            job_preemptible(group, first, priority),
            group.min_member if group is not None else 1,
            group.created if group is not None else first.created,
            [],
            group.topology_constraint if group is not None else None,
            state.group_changed.get(job_key, 0.0),
            0,
            bool(first.pod_group) and group is None,
        )
        if group is not None and group.sub_groups:
            job.sub_groups = sub_groups(group)
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
            ranks = {pod.uid: task_rank(pod.labels) for pod, _, _ in chosen if LABEL_TASK_PRIORITY in pod.labels}
            if ranks:
                job_tasks.sort(key=lambda t: (ranks.get(t.uid, UNRANKED), t.created, t.name, t.uid))
            else:
                job_tasks.sort(key=lambda t: (t.created, t.name, t.uid))
        return job, pending


def _running_gpus(node: NodeInfo, task: TaskInfo, indices: tuple[int, ...] | None) -> tuple[tuple[int, ...], int]:
    """The GPUs and per-GPU portion of a task the state shows on ``node``: its known device indices (those the node
    has), else first fit."""
    if not indices:
        return _first_fit_gpus(node, task)
    count = len(node.healthy)
    known = len(indices) == 1 and 0 <= indices[0] < count
    gpus = indices if known else tuple([g for g in indices if 0 <= g < count])
    return gpus, UNIT if task.gpu_whole else (task.gpu_frac or memory_portion(task, node))


def place_running(
    ssn: Session, task: TaskInfo, node: NodeInfo, indices: tuple[int, ...] | None, releasing: bool
) -> None:
    """Put a task the state shows on ``node`` there, running (releasing: evicted or terminating)."""
    task.gpus, task.gpu_portion = _running_gpus(node, task, indices)
    task.node, task.status = node, RUNNING
    ssn.move(task, USED, +1, +1)
    if releasing:
        ssn.move(task, REL, +1, 0)
        task.status = RELEASING
        ssn.releasing_tasks.setdefault(node.name, []).append(task)


def place_all(ssn: Session, placed: list[Placed]) -> None:
    """``place_running`` for many tasks, charging each queue once with the sums (same totals and versions)."""
    charges: dict[int, tuple[QueueInfo, list[int]]] = {}
    releasing_tasks = ssn.releasing_tasks
    for task, node, indices, releasing in placed:
        gpus, portion = _running_gpus(node, task, indices)
        task.node, task.gpus, task.gpu_portion = node, gpus, portion
        node.add(task, USED, +1)
        if releasing:
            node.add(task, REL, +1)
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
            acc[1] += task.cpu
            acc[2] += task.mem
            acc[6] += 1
            if not job.preemptible:
                acc[3] += gpu
                acc[4] += task.cpu
                acc[5] += task.mem
    if charges:
        ssn.queue_epoch += 1
    for queue, acc in charges.values():
        queue.add_allocated(acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6])


def unplace_running(ssn: Session, task: TaskInfo) -> None:
    """Undo ``place_running`` (the node is out of the index meanwhile)."""
    node = task.node
    assert node is not None
    ssn.move(task, USED, -1, -1)
    if task.status == RELEASING:
        ssn.move(task, REL, -1, 0)
        listed = ssn.releasing_tasks[node.name]
        listed.remove(task)
        if not listed:
            del ssn.releasing_tasks[node.name]


def add_request(ssn: Session, job: JobInfo, sign: int) -> None:
    """Add (sign -1: take back) what the job's pending tasks ask for to its queue and the queue's ancestors."""
    if job.queue is not None:
        job.queue.add_request(ssn.tasks_request(job.pending_tasks()), sign)


Built = tuple[Session, dict[str, JobInfo], set[str], JobBuilder, set[str], dict[object, int]]
"""What ``build_snapshot`` makes: the base session, its jobs by key, the keys of those with a pending task, the job
builder (kept to rebuild single jobs), the nodes whose tasks were placed first fit, and the node class interner."""


def build_snapshot(state: ClusterState, config: SchedulerConfig, pool: str, chash: str) -> Built:
    """The whole snapshot of ``pool``: every node, queue and job, running tasks placed, sorted once."""
    derived = state.derived
    derived.sync(state.pods)
    classes: dict[object, int] = {}
    node_names = sorted(n for n, spec in state.nodes.items() if spec.pool == pool)
    nodes = [node_info(state, name, i, classes) for i, name in enumerate(node_names)]
    node_by_name = {n.name: n for n in nodes}
    queues, roots = build_queues(state)
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
    builder = JobBuilder(state, config, pool, queues, node_by_name, signatures, tasks)
    built: list[tuple[JobInfo, bool]] = []
    placed: list[Placed] = []
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
        placed.sort(key=lambda p: task_order(p[0]))
    place_all(base, placed)
    if not first_fit:
        for listed in base.releasing_tasks.values():
            listed.sort(key=task_order)
    built.sort(key=lambda b: job_order(b[0]))
    pending: set[str] = set()
    succeeded = derived.succeeded
    for job, has_pending in built:
        if succeeded:
            job.succeeded = succeeded.get(job.key, 0)
        if job.queue is not None:
            job.queue.jobs.append(job)
        if has_pending:
            pending.add(job.key)
            add_request(base, job, +1)
    base.jobs = [b[0] for b in built]
    for node in nodes:
        node.free_whole = node.count_free_whole()
    base.index.build()
    job_by_key = {job.key: job for job in base.jobs}
    return base, job_by_key, pending, builder, first_fit, classes
