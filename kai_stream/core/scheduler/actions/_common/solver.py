"""The victim search shared by reclaim, preempt and consolidation.

``search`` grows a victim set one unit at a time, in the order the action's candidate generator yields them (the
generator reads the live session, so its filters see the evictions made so far). After each unit, once the freed GPU
could cover what the pool's free GPU cannot, it tries inside a checkpoint: place the preemptor's whole gang (on free
capacity first, else pipelined onto the capacity being released), re-place every moved victim on free capacity when
the action moves rather than kills (consolidation), and ask the action's validator. A try is skipped while the last
unit's nodes could not host even the preemptor's smallest pod. A failed try rolls back to the checkpoint and the
next unit is added; the first accepted set is then pruned of units on nodes the preemptor does not use
(re-simulated; the full set is kept if the pruned one fails) and committed. Nothing accepted -> everything is rolled
back. The pruned set is re-simulated from the accepted try's evictions, less those of the dropped units (evictions
only add to sums, so the state is the one of evicting the kept units alone), unless the action moves victims: a
move's eviction details read the victim queue's allocation as each eviction is made.

Budgets keep a cycle bounded: at most ``max_units`` units and ``max_tries`` placement tries per job, at most
``max_victim_jobs`` distinct victim jobs (consolidation: 16 by config).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from kai_stream.core.scheduler.actions._common.victims import VictimUnit
from kai_stream.core.scheduler.framework.info import GPU, PENDING, UNIT, JobInfo, NodeInfo, TaskInfo
from kai_stream.core.scheduler.framework.nodeindex import NodeIndex, _memory_portion
from kai_stream.core.scheduler.framework.session import PendingInfo, Session
from kai_stream.core.scheduler.framework.statement import Statement

__all__ = ["SearchSpec", "awaiting", "free_gpu", "place_job", "search"]


@dataclass
class SearchSpec:
    action: str
    preemptor: JobInfo
    candidates: Callable[[], Iterator[VictimUnit]]
    validate: Callable[[list[VictimUnit]], bool]
    details: Callable[[TaskInfo], dict[str, str]]
    reason: str
    move_victims: bool = False
    max_victim_jobs: int | None = None
    max_units: int = 64
    max_tries: int = 24
    pool_free_gpu: int = 0
    doomed: Callable[[list[VictimUnit]], bool] | None = None
    """A refusal of ``validate`` known before the preemptor is placed (what it reads only gets worse as the
    placement adds to the queues' allocations): a try it answers True for is failed without placing."""
    fixed_candidates: bool = False
    """The candidates do not depend on the evictions made during the search (each unit is its own job's, read
    from that job alone, and any bound on how many are taken counts the units taken, not the evictions): its
    evictions can then wait until a try may follow (``_Search.worth_a_try``)."""


def free_gpu(session: Session) -> int:
    """Free GPU (milli-devices) on schedulable nodes right now."""
    total = 0
    for node in session.nodes:
        if node.ready and not node.unschedulable:
            total += node.free_whole * UNIT
            columns = zip(node.healthy, node.gpu_used, node.gpu_rel, node.gpu_pipe, strict=True)
            for ok, used, rel, pipe in columns:
                if ok:
                    free = UNIT - used - (pipe - rel if pipe > rel else 0)
                    if 0 < free < UNIT:
                        total += free
    return total


def place_job(
    session: Session, stmt: Statement, job: JobInfo, near: list[NodeInfo] | None = None
) -> list[TaskInfo] | None:
    """Place the tasks the job offers in one pass (``Session.to_allocate``: up to its minimum, else one), all or
    none; None when refused or one does not fit. Each task goes on the best free capacity anywhere, else (with
    ``near``, the victims' nodes) pipelined onto the first of them by node order that fits with what is being
    released: KAI's node order for a preemptor, idle before releasing (the releasing capacity of other nodes is
    not searched)."""
    if session.hooks.check_job(job, session.job_request(job)) is not None:
        return None
    tasks = session.to_allocate(job)
    active = job.active_count()
    placed: list[TaskInfo] = []
    for task in tasks:
        if near is None:
            placement = session.index.find(task)
        else:
            placement = session.index.find_free(task) or session.index.find_among(task, near)
        if placement is None:
            return None
        stmt.allocate(task, placement)
        placed.append(task)
    if not placed or not session.hooks.ready(job, active + len(placed)):
        return None
    return placed


def _moved(task: TaskInfo) -> TaskInfo:
    """The pending copy of an evicted task that a move places elsewhere."""
    return replace(task, status=PENDING, node=None, gpus=(), gpu_portion=0, prev_pipelined=None)


def _move(session: Session, stmt: Statement, units: list[VictimUnit]) -> list[TaskInfo] | TaskInfo:
    """Re-place every evicted task of ``units`` on free capacity (as a copy of the task); the first task that
    finds none if one fails."""
    session.index.allowed = None
    moved: list[TaskInfo] = []
    for unit in units:
        for task in unit.tasks:
            copy = _moved(task)
            placement = session.index.find_free(copy)
            if placement is None:
                return task
            stmt.allocate(copy, placement)
            moved.append(copy)
    return moved


class _Search:
    def __init__(self, session: Session, spec: SearchSpec) -> None:
        self.ssn = session
        self.spec = spec
        self.stmt = session.statement(spec.action)
        self.placed: list[TaskInfo] = []
        self.moved: list[TaskInfo] = []
        self.near: dict[str, NodeInfo] = {}
        self.evicted = 0
        """How many units of the current victim set are evicted (a prefix; see ``worth_a_try``)."""
        self.tried_at = 0
        """The statement's checkpoint at the start of the last try (its operations before it are the evictions)."""
        self.blocker: TaskInfo | None = None
        """A victim task the last try could not move (with moving victims and a preemptor without a topology
        constraint): while it still finds no free capacity before a try, the try fails the same way."""

    def evict(self, unit: VictimUnit) -> None:
        spec = self.spec
        for task in unit.tasks:
            self.stmt.evict(
                task,
                preemptor=spec.preemptor.key,
                preemptor_queue=spec.preemptor.queue_name,
                reason=spec.reason,
                details=spec.details(task),
            )
            if task.node is not None:
                self.near.setdefault(task.node.name, task.node)

    def attempt(self, taken: list[VictimUnit]) -> bool:
        """Place the preemptor (and the moved victims) on the current evictions; keep it only if accepted."""
        spec = self.spec
        if spec.doomed is not None and spec.doomed(taken):
            return False
        if self.blocker is not None and self._still_blocked(self.blocker):
            return False
        checkpoint = self.tried_at = self.stmt.checkpoint()
        near = sorted(self.near.values(), key=lambda node: node.idx)
        placed = place_job(self.ssn, self.stmt, spec.preemptor, near)
        if placed is not None:
            moved = _move(self.ssn, self.stmt, taken) if spec.move_victims else []
            if isinstance(moved, TaskInfo):
                if spec.preemptor.topology is None:
                    self.blocker = moved
            elif spec.validate(taken):
                self.placed, self.moved = placed, moved
                return True
        self.stmt.rollback(checkpoint)
        return False

    def _still_blocked(self, task: TaskInfo) -> bool:
        """Whether ``task`` (evicted, in the victim set) finds no free capacity now, before the try places
        anything: a try only takes free capacity (the preemptor, then the moves in order), so its move of
        ``task`` would fail too. Leaves the index unrestricted, as the try would (the preemptor has no topology
        constraint, so its job check lifts any restriction, and the moves run unrestricted)."""
        index = self.ssn.index
        index.allowed = None
        return index.find_free(_moved(task)) is None

    def replay(self, units: list[VictimUnit]) -> bool:
        self.stmt.discard()
        self.near = {}
        self.evicted = 0
        self.catch_up(units)
        return self.attempt(units)

    def narrow(self, taken: list[VictimUnit], kept: list[VictimUnit]) -> bool:
        """``replay(kept)`` after an accepted try of ``taken``, without evicting the kept units again: the try is
        rolled back, the dropped units' evictions are undone, and the kept ones stay in order. Their operations
        hold the eviction details made the first time, so only for actions whose details do not depend on the
        evictions made before (see the module docstring)."""
        self.stmt.rollback(self.tried_at)
        kept_units = {id(unit) for unit in kept}
        self.stmt.withdraw_evictions({id(task) for unit in taken if id(unit) not in kept_units for task in unit.tasks})
        self.near = {}
        for unit in kept:
            for task in unit.tasks:
                if task.node is not None:
                    self.near.setdefault(task.node.name, task.node)
        self.evicted = len(kept)
        return self.attempt(kept)

    def commit(self) -> None:
        moved_to = {t.uid: t for t in self.moved}
        placed = {t.uid for t in self.placed}
        evicted = [op for op in self.stmt.ops if op.kind == "evict"]
        victims = len({op.task.job.key for op in evicted})
        moved_from: dict[str, str] = {}
        for op in evicted:
            copy = moved_to.get(op.task.uid)
            if copy is not None and copy.node is not None and op.task.node is not None:
                op.details = {**op.details, "move_to": copy.node.name, "move_gpus": ",".join(map(str, copy.gpus))}
                moved_from[op.task.uid] = op.task.node.name
        for op in self.stmt.ops:
            if op.kind == "evict":
                continue
            if op.task.uid in moved_from:
                op.reason = (
                    f"{self.spec.action}: moved from {moved_from[op.task.uid]} so that {self.spec.preemptor.key} fits"
                )
            elif op.task.uid in placed:
                op.reason = (
                    f"{self.spec.action}: placed on capacity of {len(evicted)} evicted pod(s) of {victims} job(s)"
                )
        to_pipeline = list(self.moved)
        if self.spec.move_victims or any(op.kind == "pipeline" for op in self.stmt.ops):
            to_pipeline.extend(self.placed)
        self.stmt.convert_to_pipeline(to_pipeline)
        self.stmt.commit()

    def run(self) -> bool:
        spec = self.spec
        need = self.ssn.job_request(spec.preemptor)[GPU] - spec.pool_free_gpu
        taken: list[VictimUnit] = []
        jobs: set[str] = set()
        freed = 0
        tries = 0
        self.ssn.index.allowed = None
        pending = self.ssn.pending_of(spec.preemptor)
        smallest = min(pending, key=lambda t: (t.gpu_whole * UNIT + t.gpu_frac, t.cpu, t.mem)) if pending else None
        bound = _Released() if spec.fixed_candidates else None
        for unit in spec.candidates():
            if unit.job.key not in jobs:
                if spec.max_victim_jobs is not None and len(jobs) >= spec.max_victim_jobs:
                    break
                jobs.add(unit.job.key)
            taken.append(unit)
            freed += unit.gpu
            if bound is None:
                self.catch_up(taken)
            else:
                bound.add(unit)
            if freed >= need and self.worth_a_try(unit, smallest, bound, taken):
                tries += 1
                if self.attempt(taken):
                    self.prune(taken)
                    self.commit()
                    return True
                if tries >= spec.max_tries or len(taken) >= spec.max_units:
                    break
            elif len(taken) >= spec.max_units:
                break
        self.stmt.discard()
        return False

    def catch_up(self, taken: list[VictimUnit]) -> None:
        """Evict the units of ``taken`` not evicted yet, in order."""
        for unit in taken[self.evicted :]:
            self.evict(unit)
        self.evicted = len(taken)

    def worth_a_try(
        self, unit: VictimUnit, smallest: TaskInfo | None, bound: _Released | None, taken: list[VictimUnit]
    ) -> bool:
        """Whether the preemptor's smallest pod fits on the last unit's nodes once ``taken`` is evicted (the
        evictions are made here). With fixed candidates the evictions wait for this question, and are not made
        while even ``bound`` says no: a search that never gets to a try then evicts nothing (many preemptors of
        whole GPUs find only victims spread one GPU per node)."""
        if smallest is not None and bound is not None and not bound.may_fit(self.ssn.index, smallest, unit.nodes()):
            return False
        self.catch_up(taken)
        return smallest is None or self.ssn.index.fits_among(smallest, unit.nodes())

    def prune(self, taken: list[VictimUnit]) -> None:
        used = {t.node.name for t in self.placed if t.node is not None}
        kept = [u for u in taken if u.node_names() & used]
        if len(kept) == len(taken) or not kept:
            return
        narrowed = self.replay(kept) if self.spec.move_victims else self.narrow(taken, kept)
        if not narrowed and not self.replay(taken):
            raise AssertionError("a victim set accepted once must be accepted again")


class _Released:
    """What the units taken so far free per node (GPU per device, then CPU and memory): where the preemptor could
    fit at best once they are all released, without releasing them."""

    def __init__(self) -> None:
        self.gpu: dict[int, list[int]] = {}
        self.host: dict[int, list[int]] = {}

    def add(self, unit: VictimUnit) -> None:
        for task in unit.tasks:
            node = task.node
            if node is None:
                continue
            gpu = self.gpu.get(node.idx)
            if gpu is None:
                gpu = self.gpu[node.idx] = [0] * len(node.healthy)
                self.host[node.idx] = [0, 0]
            for g in task.gpus:
                gpu[g] += task.gpu_portion
            host = self.host[node.idx]
            host[0] += task.cpu
            host[1] += task.mem

    def may_fit(self, index: NodeIndex, task: TaskInfo, nodes: list[NodeInfo]) -> bool:
        return any(_may_fit(index, task, node, self.gpu[node.idx], self.host[node.idx]) for node in nodes)


def _may_fit(index: NodeIndex, task: TaskInfo, node: NodeInfo, gpu_freed: list[int], host_freed: list[int]) -> bool:
    """Whether ``task`` might fit on ``node`` once ``gpu_freed`` / ``host_freed`` more are released there: true
    whenever ``NodeIndex.find_among`` could place it there, now or pipelined (a bound, never a placement)."""
    if not (node.ready and not node.unschedulable) or index.static(task, node) is not None:
        return False
    if node.cpu_free_future() + host_freed[0] < task.cpu or node.mem_free_future() + host_freed[1] < task.mem:
        return False
    frees = [
        UNIT - used + rel + more - pipe if ok else -1
        for ok, used, rel, pipe, more in zip(
            node.healthy, node.gpu_used, node.gpu_rel, node.gpu_pipe, gpu_freed, strict=True
        )
    ]
    if task.gpu_whole:
        return sum(1 for f in frees if f >= UNIT) >= task.gpu_whole
    portion = task.gpu_frac or (_memory_portion(task, node) if task.gpu_mem_mib else 0)
    return portion == 0 or any(f >= portion for f in frees)


def awaiting(session: Session, job: JobInfo) -> bool:
    """True (and the job's pending pods say ``WaitingForReclaim``) while pods evicted for it in an earlier cycle
    are still releasing: the job waits for them instead of evicting more."""
    count = session.awaited.get(job.key, 0)
    if not count:
        return False
    info = PendingInfo(
        "WaitingForReclaim",
        f"waiting for {count} evicted pod(s) to release their resources",
        {},
        {"releasing": str(count)},
    )
    session.set_pending(session.pending_of(job), info)
    return True


def search(session: Session, spec: SearchSpec) -> bool:
    """Find, simulate and commit the smallest accepted victim set for ``spec.preemptor``; False if none."""
    return _Search(session, spec).run()
