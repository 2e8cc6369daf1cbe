"""allocate: place pending jobs in queue/job order on free capacity; gangs are all-or-nothing.

A job goes in passes (KAI ``GetTasksToAllocate``): first the tasks it needs to reach minMember (and each
subgroup's minMember), as one gang, then one task at a time (one per subgroup); after each pass that leaves
tasks pending it goes back in line, so the queue and job order choose again. Per pass: refuse it if the queue
would go over a limit (or a non-preemptible job over its deserved quota) with the pass's tasks; place each of
them on the best node, all or none. A pass with a task on releasing capacity, while the job has fewer than
minMember pods bound or allocated, is pipelined as a whole (decided, not bound). The first pass that fails
ends the job for this action; its pending tasks get the reason, with per-predicate node counts.

A job that failed on the shape cache's verdict (nothing placed) passes its reason to the jobs of its class
(``Session.job_class``) that follow it in its leaf with nothing changed in between (``JobsByQueue.in_order``):
each of them would hit the same verdict. A saturated cycle tries only the first job of each such run.
"""

from __future__ import annotations

from kai_stream.core.events import PendingCode
from kai_stream.core.scheduler.framework.info import ALLOCATED, RELEASING, RUNNING, JobClass, JobInfo, TaskInfo
from kai_stream.core.scheduler.framework.ordering import JobsByQueue
from kai_stream.core.scheduler.framework.session import PendingInfo, Session
from kai_stream.core.scheduler.framework.statement import Operation

NAME = "allocate"


MAX_FAULTS_NAMED = 3


def _faults(ssn: Session) -> str:
    """The pool's unhealthy GPUs, node by node (at most ``MAX_FAULTS_NAMED``), for an "Unhealthy" reason."""
    faults = [f"{node.name} {fault}" for node in ssn.nodes for fault in node.gpu_faults]
    more = f"; and {len(faults) - MAX_FAULTS_NAMED} more" if len(faults) > MAX_FAULTS_NAMED else ""
    return "; ".join(faults[:MAX_FAULTS_NAMED]) + more


def _no_fit(predicates: dict[str, int], ssn: Session) -> PendingInfo:
    """The reason is about the pod it is given to: it is shared by every job of the failing task's shape, so it
    names no task (it named the first job's, which changed from cycle to cycle)."""
    code: PendingCode = "Unhealthy" if predicates.get("UnhealthyGPU") else "NoNodeFits"
    parts = ", ".join(f"{k}: {v}" for k, v in sorted(predicates.items()))
    reason = f"no node fits the pod ({parts or 'no nodes in pool'})"
    faults = _faults(ssn) if code == "Unhealthy" else ""
    return PendingInfo(code, f"{reason}; unhealthy GPUs: {faults}" if faults else reason, predicates, {})


class _Diagnosis:
    """Per node of the pool, the first predicate a task shape fails there (None: it fits), and their counts."""

    __slots__ = ("counts", "failures", "state_id")

    def __init__(self, state_id: int, failures: list[str | None], counts: dict[str, int]) -> None:
        self.state_id = state_id
        self.failures = failures
        self.counts = counts


class _Allocator:
    def __init__(self, session: Session) -> None:
        self.ssn = session
        self._diagnoses: dict[tuple[int, ...], _Diagnosis] = {}
        self._job_failures: dict[tuple[object, ...], tuple[int, PendingInfo]] = {}
        self._commits: dict[int, int] = {session.state_id: 0}
        """State ids this action committed (the one it began with first), to their position in ``_touched``."""
        self._touched: list[list[int]] = [[]]
        """Per committed state: the nodes (by index) whose usage the commit that led to it changed."""

    def committed(self, touched: list[int]) -> None:
        """Record a commit of this action: the session is now at a new state that differs only on ``touched``."""
        self._commits[self.ssn.state_id] = len(self._touched)
        self._touched.append(touched)

    def diagnose(self, task: TaskInfo, open_ops: list[Operation]) -> dict[str, int]:
        """``NodeIndex.diagnose(task)``. Cached per task shape; a cached diagnosis of an earlier committed state is
        brought up to date on the nodes changed since (committed by this action, or ``open_ops`` placed by the
        open statement), the only ones where a node's first failure can differ."""
        ssn = self.ssn
        key = task.shape
        cached = self._diagnoses.get(key)
        if cached is not None and cached.state_id == ssn.state_id:
            return cached.counts
        since = self._commits.get(cached.state_id) if cached is not None else None
        if cached is None or since is None:
            nodes = ssn.nodes
            failures = [ssn.index._first_failure(task, node) for node in nodes]
            counts: dict[str, int] = {}
            for reason in failures:
                if reason is not None:
                    counts[reason] = counts.get(reason, 0) + 1
            self._diagnoses[key] = _Diagnosis(ssn.state_id, failures, counts)
            return counts
        changed = {i for touched in self._touched[since + 1 :] for i in touched}
        changed.update(op.task.node.idx for op in open_ops if op.task.node is not None)
        failures = list(cached.failures)
        counts = dict(cached.counts)
        nodes = ssn.nodes
        for i in changed:
            old, new = failures[i], ssn.index._first_failure(task, nodes[i])
            if old == new:
                continue
            failures[i] = new
            if old is not None:
                counts[old] -= 1
            if new is not None:
                counts[new] = counts.get(new, 0) + 1
        ordered = sorted((failures.index(r), r) for r, n in counts.items() if n > 0)
        counts = {r: counts[r] for _, r in ordered}
        self._diagnoses[key] = _Diagnosis(ssn.state_id, failures, counts)
        return counts

    def mark(self, tasks: list[TaskInfo], info: PendingInfo) -> None:
        self.ssn.set_pending(tasks, info)

    def allocate_job(self, job: JobInfo) -> tuple[PendingInfo | None, bool]:
        """One pass of ``job``: place the tasks it offers now (``Session.to_allocate``), all or none. Returns the
        reason it was given when that reason is its class's at this state (``job_class``) and nothing was placed,
        else None; and whether the pass placed its tasks with more of the job still pending (it goes back in
        line)."""
        ssn = self.ssn
        pending = ssn.pending_of(job)
        if not pending:
            return None, False
        if job.group_missing:
            reason = f"PodGroup {job.key} not observed yet: its gang size is unknown"
            self.mark(pending, PendingInfo("GangIncomplete", reason, {}, {"podGroup": job.key}))
            return None, False
        alive, active = job.alive_active()
        if alive < job.min_member:
            info = PendingInfo(
                "GangIncomplete",
                f"job {job.key} has {alive} pods, needs minMember {job.min_member}",
                {},
                {"pods": str(alive), "minMember": str(job.min_member)},
            )
            self.mark(pending, info)
            return None, False
        short = _short_sub_group(job)
        if short is not None:
            self.mark(pending, short)
            return None, False
        request = ssn.job_request(job)
        refused = ssn.hooks.check_job(job, request)
        if refused is not None:
            self.mark(pending, PendingInfo(refused[0], refused[1], {}, {}))
            return None, False
        tasks = ssn.to_allocate(job)
        shape = (tuple([t.shape for t in tasks]), job.min_member, active, job.queue_name, job.topology, job.sub_groups)
        cached = self._job_failures.get(shape)
        if cached is not None and cached[0] == ssn.state_id:
            self.mark(pending, cached[1])
            return cached[1], False
        start_id = ssn.state_id
        stmt = ssn.statement(NAME)
        failure: PendingInfo | None = None
        for task in tasks:
            placement = ssn.index.find(task)
            if placement is None:
                failure = _no_fit(self.diagnose(task, stmt.ops), ssn)
                break
            stmt.allocate(task, placement)
        if failure is not None or not ssn.hooks.ready(job, active + len(tasks)):
            stmt.discard()
            info = failure or _unready(job, active, len(tasks))
            self._job_failures[shape] = (start_id, info)
            self.mark(pending, info)
            return (info if ssn.state_id == start_id else None), False
        if any(op.kind == "pipeline" for op in stmt.ops) and _bound_or_allocated(job) < job.min_member:
            stmt.convert_to_pipeline([op.task for op in stmt.ops])
        touched = [op.task.node.idx for op in stmt.ops if op.task.node is not None]
        stmt.commit()
        self.committed(touched)
        return None, len(tasks) < len(pending)


def _short_sub_group(job: JobInfo) -> PendingInfo | None:
    """``GangIncomplete`` for the first subgroup with fewer pods (not releasing) than its minMember: it cannot
    start, so neither can the job."""
    for name, need in job.sub_groups:
        alive = sum(1 for t in job.tasks if t.sub_group == name and t.status != RELEASING)
        if alive < need:
            return PendingInfo(
                "GangIncomplete",
                f"job {job.key} subgroup {name} has {alive} pods, needs minMember {need}",
                {},
                {"subGroup": name, "pods": str(alive), "minMember": str(need)},
            )
    return None


def _unready(job: JobInfo, active: int, placed: int) -> PendingInfo:
    """``GangIncomplete`` for a pass that placed its tasks and still left the job below its minimum."""
    return PendingInfo(
        "GangIncomplete",
        f"job {job.key} would have {active + placed} active pods ({placed} placed now), needs minMember"
        f" {job.min_member} and each subgroup's",
        {},
        {"active": str(active + placed), "minMember": str(job.min_member)},
    )


def _bound_or_allocated(job: JobInfo) -> int:
    return sum(1 for t in job.tasks if t.status == RUNNING or t.status == ALLOCATED)


def run(session: Session) -> None:
    allocator = _Allocator(session)
    for job in session.pending_jobs:
        if job.queue is None:
            allocator.mark(
                session.pending_of(job),
                PendingInfo("UnknownQueue", f"queue {job.queue_name!r} does not exist or is not a leaf", {}, {}),
            )
    order = JobsByQueue(session, [j for j in session.pending_jobs if j.queue is not None and session.pending_of(j)])
    shared: PendingInfo | None = None
    alike: JobClass | None = None
    for job in order.in_order():
        if shared is not None and alike is not None and order.followed and session.job_class(job) == alike:
            allocator.mark(session.pending_of(job), shared)
            continue
        shared, again = allocator.allocate_job(job)
        alike = session.job_class(job) if shared is not None else None
        if again:
            order.push_back(job)
