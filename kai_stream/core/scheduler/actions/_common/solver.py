"""The victim search shared by reclaim, preempt and consolidation.

``search`` grows a victim set one unit at a time, in the order the action's candidate generator yields them
(the generator reads the live session, so its filters see the evictions made so far). After each unit, once
the freed GPU could cover what the pool's free GPU cannot, it tries inside a checkpoint: place the preemptor's
whole gang (pipelined onto the capacity being released), re-place every moved victim on free capacity when the
action moves rather than kills (consolidation), and ask the action's validator. A try is skipped while the last
unit's nodes could not host even the preemptor's smallest pod. A failed try rolls back to the checkpoint and
the next unit is added; the first accepted set is then pruned of units on nodes the preemptor
does not use (re-simulated; the full set is kept if the pruned one fails) and committed. Nothing accepted ->
everything is rolled back.

Budgets keep a cycle bounded: at most ``max_units`` units and ``max_tries`` placement tries per job, at most
``max_victim_jobs`` distinct victim jobs (consolidation: 16 by config).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from kai_stream.core.scheduler.actions._common.victims import VictimUnit
from kai_stream.core.scheduler.framework.info import GPU, PENDING, UNIT, JobInfo, NodeInfo, TaskInfo
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
    """Place the job's pending tasks; None when refused or the gang is not reached. With ``near`` (the victims'
    nodes) each task goes there first (free, then releasing capacity), else on free capacity anywhere."""
    if session.hooks.check_job(job, session.job_request(job)) is not None:
        return None
    pending = session.pending_of(job)
    active = job.active_count()
    placed: list[TaskInfo] = []
    remaining = len(pending)
    for task in pending:
        remaining -= 1
        if near is None:
            placement = session.index.find(task)
        else:
            placement = session.index.find_among(task, near) or session.index.find_free(task)
        if placement is None:
            if active + len(placed) + remaining < job.min_member:
                return None
            continue
        stmt.allocate(task, placement)
        placed.append(task)
    if not placed or not session.hooks.ready(job, active + len(placed)):
        return None
    return placed


def _move(session: Session, stmt: Statement, units: list[VictimUnit]) -> list[TaskInfo] | None:
    """Re-place every evicted task of ``units`` on free capacity (as a copy of the task); None if one fails."""
    session.index.allowed = None
    moved: list[TaskInfo] = []
    for unit in units:
        for task in unit.tasks:
            copy = replace(task, status=PENDING, node=None, gpus=(), gpu_portion=0, prev_pipelined=None)
            placement = session.index.find_free(copy)
            if placement is None:
                return None
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

    def evict(self, unit: VictimUnit) -> None:
        spec = self.spec
        for task in unit.tasks:
            self.stmt.evict(task, preemptor=spec.preemptor.key, reason=spec.reason, details=spec.details(task))
            if task.node is not None:
                self.near.setdefault(task.node.name, task.node)

    def attempt(self, taken: list[VictimUnit]) -> bool:
        """Place the preemptor (and the moved victims) on the current evictions; keep it only if accepted."""
        spec = self.spec
        checkpoint = self.stmt.checkpoint()
        placed = place_job(self.ssn, self.stmt, spec.preemptor, list(self.near.values()))
        if placed is not None:
            moved = _move(self.ssn, self.stmt, taken) if spec.move_victims else []
            if moved is not None and spec.validate(taken):
                self.placed, self.moved = placed, moved
                return True
        self.stmt.rollback(checkpoint)
        return False

    def replay(self, units: list[VictimUnit]) -> bool:
        self.stmt.discard()
        self.near = {}
        for unit in units:
            self.evict(unit)
        return self.attempt(units)

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
        index = self.ssn.index
        index.allowed = None
        pending = self.ssn.pending_of(spec.preemptor)
        smallest = min(pending, key=lambda t: (t.gpu_whole * UNIT + t.gpu_frac, t.cpu, t.mem)) if pending else None
        for unit in spec.candidates():
            if unit.job.key not in jobs:
                if spec.max_victim_jobs is not None and len(jobs) >= spec.max_victim_jobs:
                    break
                jobs.add(unit.job.key)
            self.evict(unit)
            taken.append(unit)
            freed += unit.gpu
            useless = smallest is not None and index.find_among(smallest, unit.nodes()) is None
            if freed < need or useless:
                if len(taken) >= spec.max_units:
                    break
                continue
            tries += 1
            if self.attempt(taken):
                self.prune(taken)
                self.commit()
                return True
            if tries >= spec.max_tries or len(taken) >= spec.max_units:
                break
        self.stmt.discard()
        return False

    def prune(self, taken: list[VictimUnit]) -> None:
        used = {t.node.name for t in self.placed if t.node is not None}
        kept = [u for u in taken if u.node_names() & used]
        if len(kept) == len(taken) or not kept:
            return
        if not self.replay(kept) and not self.replay(taken):
            raise AssertionError("a victim set accepted once must be accepted again")


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
    for task in session.pending_of(job):
        session.set_pending(task, info)
    return True


def search(session: Session, spec: SearchSpec) -> bool:
    """Find, simulate and commit the smallest accepted victim set for ``spec.preemptor``; False if none."""
    return _Search(session, spec).run()
