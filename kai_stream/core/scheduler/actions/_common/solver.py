"""The victim search shared by reclaim, preempt and consolidation.

``search`` grows a victim set one unit at a time, in the order the action's candidate generator yields them (the
generator reads the live session, so its filters see the evictions made so far). After each unit, once the freed GPU
(with what is being released and not yet claimed on the victims' nodes) could cover what the pool's free GPU cannot,
it tries inside a checkpoint: place the preemptor's whole gang (on free
capacity first, else pipelined onto the capacity being released), re-place every moved victim on free capacity when
the action moves rather than kills (consolidation), and ask the action's validator. A single-pod preemptor's try
evicts, as KAI's by-node scenarios do, only the units of the victim jobs on one node of the last unit's job at a time
(``_scopes``); the others keep running. A try is skipped while the last unit's nodes could not host even the
preemptor's smallest pod. A failed try rolls back to the checkpoint and the
next unit is added; the first accepted set is then pruned of units on nodes the preemptor does not use
(re-simulated; the full set is kept if the pruned one fails) and committed. Nothing accepted -> everything is rolled
back. The pruned set is re-simulated from the accepted try's evictions, less those of the dropped units (evictions
only add to sums, so the state is the one of evicting the kept units alone), unless the action moves victims: a
move's eviction details read the victim queue's allocation as each eviction is made.

Budgets keep a cycle bounded: at most ``max_units`` units and ``max_tries`` placement tries per job, at most
``max_victim_jobs`` distinct victim jobs (consolidation: 16 by config).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from fractions import Fraction

from kai_stream.core.scheduler.actions._common.victims import VictimUnit, sub_group_active
from kai_stream.core.scheduler.framework.info import (
    GPU,
    PENDING,
    PIPELINED,
    RELEASING,
    UNIT,
    JobInfo,
    NodeInfo,
    TaskInfo,
)
from kai_stream.core.scheduler.framework.nodeindex import NodeIndex, Placement, _memory_portion
from kai_stream.core.scheduler.framework.session import PendingInfo, Session
from kai_stream.core.scheduler.framework.statement import Statement

__all__ = [
    "SearchSpec",
    "awaiting",
    "free_gpu",
    "place_job",
    "search",
    "tasks_request",
]


@dataclass
class SearchSpec:
    action: str
    preemptor: JobInfo
    candidates: Callable[[], Iterator[VictimUnit]]
    validate: Callable[[list[VictimUnit]], bool]
    """Accepts a simulated scenario, given its victims: the units taken, cut to the tasks that stay evicted."""
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
    moves: bool = True
    """Victims may be moved to other nodes in a simulation (else only put back on their own node)."""
    preemptor_first: bool = False
    """The preemptor goes before every victim job in queue order (preempt: same queue, higher priority), so a
    simulation places it first, and ends there when it does not fit."""
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


def tasks_request(session: Session, tasks: list[TaskInfo]) -> list[int]:
    """What ``tasks`` ask for together (``Session.task_request`` summed)."""
    if len(tasks) == 1:
        return session.task_request(tasks[0])
    total = [0, 0, 0]
    for task in tasks:
        for r, amount in enumerate(session.task_request(task)):
            total[r] += amount
    return total


def _moved(task: TaskInfo) -> TaskInfo:
    """The pending copy of an evicted task that a move places elsewhere."""
    return replace(task, status=PENDING, node=None, gpus=(), gpu_portion=0, prev_pipelined=None)


def _future_left(task: TaskInfo, node: NodeInfo) -> tuple[int, int]:
    """What ``node`` has left once what is being released there is free: GPU for a GPU task, then CPU."""
    gpu = 0
    if task.gpu_whole or task.gpu_frac or task.gpu_mem_mib:
        gpu = sum(node.gpu_free_future(g) for g in range(len(node.healthy)) if node.healthy[g])
    return gpu, node.cpu_free_future()


class _AllBut(AbstractSet[int]):
    """Every node index of the pool but some (``NodeIndex.allowed`` hiding the nodes with capacity being released)."""

    def __init__(self, excluded: AbstractSet[int], count: int) -> None:
        self.excluded, self.count = excluded, count

    def __contains__(self, idx: object) -> bool:
        return idx not in self.excluded

    def __iter__(self) -> Iterator[int]:
        return (i for i in range(self.count) if i not in self.excluded)

    def __len__(self) -> int:
        return self.count - sum(1 for i in self.excluded if 0 <= i < self.count)


def _still_evicted(taken: list[VictimUnit], moved: list[TaskInfo]) -> list[VictimUnit]:
    """The units of ``taken`` cut to their tasks that stay evicted after a simulation (neither running again on
    their node nor moved): KAI's victims of a scenario, whose resources its validators count."""
    copies = {t.uid for t in moved}
    out: list[VictimUnit] = []
    for unit in taken:
        tasks = [t for t in unit.tasks if t.status == RELEASING and t.uid not in copies]
        if len(tasks) == len(unit.tasks):
            out.append(unit)
        elif tasks:
            out.append(VictimUnit(unit.job, tasks))
    return out


def _scopes(taken: list[VictimUnit], preemptor_tasks: int) -> Iterator[list[VictimUnit]]:
    """The victim sets a simulation of ``taken`` evicts, in turn (KAI's ``byPodSolver.solveOnPotentialNodes``): per
    node where the last unit's job has a pod (``getNodesOfJob``), the units of the jobs with a unit on that node
    (``ByNodeScenario.VictimsTasksFromNodes``), the others left running; each distinct set once, none empty (KAI
    would simulate evicting nothing there). KAI walks the nodes in Go map order; here by name. For a preemptor placing
    several tasks, KAI also evicts the victims it recorded for the tasks before (``JobSolver.Solve``, one task more
    per step), which this one-pass search does not track: ``taken`` whole."""
    if preemptor_tasks != 1 or len(taken) == 1:
        yield taken
        return
    nodes = {t.node.name for t in taken[-1].job.tasks if t.node is not None}
    seen: set[tuple[int, ...]] = set()
    for name in sorted(nodes):
        jobs = {id(unit.job) for unit in taken if name in unit.node_names()}
        scope = [unit for unit in taken if id(unit.job) in jobs]
        key = tuple(id(unit) for unit in scope)
        if scope and key not in seen:
            seen.add(key)
            yield scope


def _first_in_leaf(session: Session, preemptor: JobInfo, taken: list[VictimUnit]) -> bool:
    """Whether ``preemptor`` goes before the jobs of ``taken`` (all of its leaf) by job order."""
    key = session.job_key(preemptor)
    return all(key < session.job_key(unit.job) for unit in taken)


def _by_job(taken: list[VictimUnit]) -> dict[int, tuple[JobInfo, list[TaskInfo]]]:
    """The tasks of ``taken`` per victim job (by ``id``), jobs in the order first taken."""
    victims: dict[int, tuple[JobInfo, list[TaskInfo]]] = {}
    for unit in taken:
        entry = victims.get(id(unit.job))
        if entry is None:
            victims[id(unit.job)] = (unit.job, list(unit.tasks))
        else:
            entry[1].extend(unit.tasks)
    return victims


def _to_put_back(job: JobInfo, evicted: list[TaskInfo]) -> list[TaskInfo]:
    """The evicted tasks of a victim job that a simulation places again (KAI's tasks to allocate of the job): those
    its gang needs while it is below its minimum, else one; in task order."""
    if len(evicted) == 1:
        return evicted
    if job.sub_groups:
        chosen = _sub_groups_to_put_back(job, evicted)
        if chosen:
            return chosen
    active = job.active_count()
    count = job.min_member - active if active < job.min_member else 1
    return sorted(evicted, key=lambda t: (t.created, t.name, t.uid))[:count]


def _sub_groups_to_put_back(job: JobInfo, evicted: list[TaskInfo]) -> list[TaskInfo]:
    """``_to_put_back`` of a job with subgroups (KAI's tasks to allocate over its pod sets): each subgroup below its
    minMember the tasks it needs, subgroups by name; with none below, one task of the subgroup least above its
    minMember (lowest active/minMember, then name). Tasks of no listed subgroup are not put back."""
    minimum = dict(job.sub_groups)
    active = sub_group_active(job)
    back: dict[str, list[TaskInfo]] = {}
    for t in sorted(evicted, key=lambda t: (t.created, t.name, t.uid)):
        name = t.sub_group
        if name is not None and name in minimum:
            back.setdefault(name, []).append(t)
    short = [name for name in sorted(back) if active[name] < minimum[name]]
    if short:
        return [t for name in short for t in back[name][: minimum[name] - active[name]]]
    if not back:
        return []
    first = min(back, key=lambda name: (Fraction(active[name], minimum[name]), name))
    return back[first][:1]


def _in_queue_order(session: Session, entries: list[tuple[JobInfo, list[TaskInfo]]]) -> Iterator[JobInfo]:
    """The jobs of ``entries`` in KAI's queue order, each taken after the caller placed the one before: the leaf
    whose first job (by job order) goes first (``_before``, as things stand then) gives that job next. A job is
    ranked with the request of the tasks it places (``Session.ranking_override``, set meanwhile and reset at the
    end).

    As in KAI (``actions/common/action.go`` ``GetJobsToAllocate``), a leaf's other pending jobs stand in its line
    too: the simulation passes over them (``TryToVirtuallyAllocatePreemptorAndGetVictims``), but while one is first
    in its leaf by job order it is the job the leaf is ranked with. Only those of the entries' leaves that come
    before an entry by job order can be first while an entry waits (a pending job of another leaf only ranks a
    parent queue: not read)."""
    if len(entries) == 1:
        yield entries[0][0]
        return
    by_leaf: dict[str, list[JobInfo]] = {}
    for job, _ in entries:
        assert job.queue is not None
        by_leaf.setdefault(job.queue.name, []).append(job)
    listed = {id(job) for job, _ in entries}
    for jobs in by_leaf.values():
        leaf = jobs[0].queue
        assert leaf is not None
        last = max(session.job_key(job) for job in jobs)
        jobs.extend(
            job
            for job in session.pending_in(leaf)
            if id(job) not in listed and session.pending_of(job) and session.job_key(job) < last
        )
        jobs.sort(key=session.job_key, reverse=True)
    saved = session.ranking_override
    override: dict[int, tuple[int, int, int]] = {}
    for job, tasks in entries:
        gpu, cpu, mem = tasks_request(session, tasks)
        override[id(job)] = (gpu, cpu, mem)
    session.ranking_override = override
    try:
        while by_leaf:
            heads = [jobs[-1] for jobs in by_leaf.values()]
            best = heads[0]
            for head in heads[1:]:
                if _before(session, head, best):
                    best = head
            assert best.queue is not None
            jobs = by_leaf[best.queue.name]
            jobs.pop()
            if not jobs:
                del by_leaf[best.queue.name]
            if id(best) in listed:
                yield best
    finally:
        session.ranking_override = saved


def _before(session: Session, a: JobInfo, b: JobInfo) -> bool:
    """Whether the leaf of ``a`` goes before the leaf of ``b`` (each ranked with that job) in KAI's queue order as
    things stand: at the first level where their queue paths part, by the queue-order key of each side (then its
    name)."""
    qa, qb = a.queue, b.queue
    assert qa is not None and qb is not None
    path_a, path_b = qa.ancestry()[::-1], qb.ancestry()[::-1]
    for x, y in zip(path_a, path_b, strict=False):
        if x is not y:
            kx, ky = session.hooks.queue_key(x, a), session.hooks.queue_key(y, b)
            return kx < ky if kx != ky else x.name < y.name
    return False


class _Search:
    def __init__(self, session: Session, spec: SearchSpec) -> None:
        self.ssn = session
        self.spec = spec
        self.stmt = session.statement(spec.action)
        self.tasks = session.to_allocate(spec.preemptor)
        self.placed: list[TaskInfo] = []
        self.moved: list[TaskInfo] = []
        self.near: dict[str, NodeInfo] = {}
        self.evicted = 0
        """How many units of the current victim set are evicted (a prefix; see ``worth_a_try``)."""
        self.tried_at = 0
        """The statement's checkpoint at the start of the last try (its operations before it are the evictions)."""
        self.accepted: list[VictimUnit] = []
        """The units whose evictions the last accepted simulation made (its scope)."""
        self.copies: dict[int, TaskInfo] = {}
        """Per victim task (by ``id``): its pending copy for moves (``_moved``), made once per search (a rolled back
        placement leaves it pending again)."""

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
        """Simulate ``taken`` (all evicted) scope by scope (``_scopes``): the units outside the scope keep running
        (un-evicted inside the try's checkpoint) and only the scope's nodes are searched for releasing capacity; the
        first scope accepted is kept (``self.accepted``)."""
        spec = self.spec
        for scope in _scopes(taken, len(self.tasks)):
            if spec.doomed is not None and spec.doomed(scope):
                continue
            checkpoint = self.tried_at = self.stmt.checkpoint()
            nodes = self.near
            if len(scope) < len(taken):
                inside = {id(unit) for unit in scope}
                for unit in taken:
                    if id(unit) not in inside:
                        for task in unit.tasks:
                            self.stmt.unevict(task)
                nodes = {node.name: node for unit in scope for node in unit.nodes()}
            if self._simulate(scope, sorted(nodes.values(), key=lambda node: node.idx), checkpoint):
                self.accepted = scope
                return True
        return False

    def _simulate(self, taken: list[VictimUnit], near: list[NodeInfo], checkpoint: int) -> bool:
        """Simulate the evictions of ``taken``: the preemptor and the victims' jobs are placed again in queue order
        (``_in_queue_order``; victims of the preemptor's own leaf by job order), the preemptor's tasks as
        ``place_job`` places them, each victim job as ``_put_back`` does; keep it only if the preemptor was placed,
        no victim stays evicted when the action moves rather than kills (consolidation), and the validator
        accepts; else roll back to ``checkpoint``."""
        spec = self.spec
        ssn = self.ssn
        preemptor = spec.preemptor
        leaf = preemptor.queue
        chosen: dict[int, list[TaskInfo]] = {}
        jobs: Iterable[JobInfo]
        placed: list[TaskInfo] | None = None
        same_leaf = spec.preemptor_first or all(unit.job.queue is leaf for unit in taken)
        if spec.preemptor_first or (same_leaf and _first_in_leaf(ssn, preemptor, taken)):
            placed = place_job(ssn, self.stmt, preemptor, near)
            if placed is None:
                self.stmt.rollback(checkpoint)
                return False
            victims = _by_job(taken)
            jobs = sorted([job for job, _ in victims.values()], key=ssn.job_key)
        elif same_leaf:
            victims = _by_job(taken)
            jobs = sorted([preemptor, *(job for job, _ in victims.values())], key=ssn.job_key)
        else:
            victims = _by_job(taken)
            chosen = {k: _to_put_back(job, tasks) for k, (job, tasks) in victims.items()}
            entries = [(victims[k][0], tasks) for k, tasks in chosen.items()]
            jobs = _in_queue_order(ssn, [(preemptor, self.tasks), *entries])
        moved: list[TaskInfo] = []
        for job in jobs:
            if job is preemptor:
                placed = place_job(ssn, self.stmt, job, near)
                if placed is None:
                    break
            else:
                tasks = chosen.get(id(job))
                if tasks is None:
                    tasks = _to_put_back(job, victims[id(job)][1])
                moved.extend(self._put_back(tasks, near))
        left = _still_evicted(taken, moved) if placed is not None else []
        if placed is not None and not (spec.move_victims and left) and spec.validate(left):
            self.placed, self.moved = placed, moved
            return True
        self.stmt.rollback(checkpoint)
        return False

    def _put_back(self, chosen: list[TaskInfo], near: list[NodeInfo]) -> list[TaskInfo]:
        """KAI's re-placement of a victim job in the simulation: its ``chosen`` evicted tasks (``_to_put_back``), each
        on free capacity of another node when bin-packing picks one (``_free_placement``), else back on its own node
        (it keeps running; a fraction only when the device KAI's packing picks there, counting what is released, is
        its own, else it moves to that device), else pipelined onto another victim's node; all of them or none (none
        when the job checks refuse them: a queue limit). A task placed elsewhere is moved (a pending copy is placed);
        the copies are returned. The placements are looked for with the evicted task itself (the node index reads
        only its shape and scheduling constraints, the same on its pending copy)."""
        ssn = self.ssn
        index = ssn.index
        index.allowed = None
        if not chosen or ssn.hooks.check_job(chosen[0].job, tasks_request(ssn, chosen)) is not None:
            return []
        checkpoint = self.stmt.checkpoint()
        moved: list[TaskInfo] = []
        for task in chosen:
            node = task.node
            assert node is not None
            placement = self._free_placement(task, node, near) if self.spec.moves else None
            if placement is None or placement.node is node:
                home = placement if task.gpu_portion == UNIT else index.find_releasing_on(task, node)
                if task.gpu_portion == UNIT or (home is not None and home.gpus == task.gpus):
                    if self._unevict(task):
                        continue
                elif home is not None:
                    placement = home
            if placement is None and self.spec.moves:
                placement = index.find_among(task, near)
            if placement is None:
                self.stmt.rollback(checkpoint)
                return []
            copy = self.copies.get(id(task))
            if copy is None or copy.node is not None:
                copy = self.copies[id(task)] = _moved(task)
            self.stmt.allocate(copy, placement)
            moved.append(copy)
        return moved

    def _free_placement(self, task: TaskInfo, own: NodeInfo, near: list[NodeInfo]) -> Placement | None:
        """The free capacity KAI's bin-packing picks for a copy of the evicted ``task``: among the nodes where it fits
        now, the one with the least left once what is being released there is free too (``nodeplacement/pack.go``
        scores idle + releasing, so its own node, where it releases its share, comes after a node as full without
        it), ties to the first by name (``framework/session.go`` ``sortNodesByScore``: its own node when that is
        first). The nodes of this search's victims (``near``, the victim's own among them) are scanned; the others
        are ranked by ``find_free`` (by what is free now: what earlier searches of the cycle release there is mostly
        taken by their preemptors)."""
        ssn = self.ssn
        index = ssn.index
        index.allowed = _AllBut({node.idx for node in near}, len(ssn.nodes))
        try:
            best = index.find_free(task)
        finally:
            index.allowed = None
        score = None if best is None else _future_left(task, best.node)
        whole = task.gpu_whole
        for node in near:
            if node.free_whole < whole:
                continue
            found = index.find_free_on(task, node)
            if found is not None:
                left = _future_left(task, node)
                if score is None or left < score or (left == score and best is not None and node.idx < best.node.idx):
                    best, score = found, left
        return best

    def _unevict(self, task: TaskInfo) -> bool:
        """Let ``task`` keep running on its node when what is placed there in this try leaves it room (pipelined
        whole-GPU pods on its devices move to other free devices of the node: KAI counts whole devices, not
        which)."""
        node = task.node
        assert node is not None
        if node.cpu_free_future() < task.cpu or node.mem_free_future() < task.mem:
            return False
        portion = task.gpu_portion
        used, rel, pipe = node.gpu_used, node.gpu_rel, node.gpu_pipe
        conflicts = {g for g in task.gpus if UNIT - used[g] + rel[g] - portion - pipe[g] < 0}
        if conflicts and not self._swap(task, node, conflicts):
            return False
        self.stmt.unevict(task)
        return True

    def _swap(self, task: TaskInfo, node: NodeInfo, conflicts: set[int]) -> bool:
        """Move this try's whole-GPU pods pipelined on ``conflicts`` (devices of the whole-GPU ``task``) to free
        devices of the node; False (nothing moved) when that does not clear them."""
        if task.gpu_portion != UNIT:
            return False
        movers = [
            op.task
            for op in self.stmt.ops[self.tried_at :]
            if op.kind == "pipeline"
            and op.task.node is node
            and op.task.status == PIPELINED
            and not conflicts.isdisjoint(op.task.gpus)
        ]
        if any(m.gpu_portion != UNIT for m in movers):
            return False
        if any(node.gpu_pipe[g] != sum(UNIT for m in movers if g in m.gpus) for g in conflicts):
            return False
        spares = [
            h
            for h in range(len(node.healthy))
            if node.healthy[h] and h not in task.gpus and node.gpu_free_future(h) == UNIT
        ]
        if sum(1 for m in movers for g in m.gpus if g in conflicts) > len(spares):
            return False
        for m in movers:
            gpus = tuple(sorted(spares.pop(0) if g in conflicts else g for g in m.gpus))
            self.ssn.unplace(m)
            self.ssn.place(m, node, gpus, UNIT, pipelined=True)
        return True

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
        kept = {id(op.task) for op in self.stmt.ops if op.kind == "unevict"}
        evicted = [op for op in self.stmt.ops if op.kind == "evict" and id(op.task) not in kept]
        victims = len({op.task.job.key for op in evicted})
        moved_from: dict[str, str] = {}
        for op in evicted:
            copy = moved_to.get(op.task.uid)
            if copy is not None and copy.node is not None and op.task.node is not None:
                op.details = {**op.details, "move_to": copy.node.name, "move_gpus": ",".join(map(str, copy.gpus))}
                moved_from[op.task.uid] = op.task.node.name
        for op in self.stmt.ops:
            if op.kind in ("evict", "unevict"):
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
        if evicted or self.spec.move_victims or any(op.kind == "pipeline" for op in self.stmt.ops):
            to_pipeline.extend(self.placed)
        self.stmt.convert_to_pipeline(to_pipeline)
        self.stmt.commit()

    def run(self) -> bool:
        spec = self.spec
        need = tasks_request(self.ssn, self.tasks)[GPU] - spec.pool_free_gpu
        taken: list[VictimUnit] = []
        jobs: set[str] = set()
        freed = 0
        tries = 0
        self.ssn.index.allowed = None
        pending = self.tasks
        smallest = min(pending, key=lambda t: (t.gpu_whole * UNIT + t.gpu_frac, t.cpu, t.mem)) if pending else None
        bound = _Released() if spec.fixed_candidates else None
        seen: set[int] = set()
        for unit in spec.candidates():
            if unit.job.key not in jobs:
                if spec.max_victim_jobs is not None and len(jobs) >= spec.max_victim_jobs:
                    break
                jobs.add(unit.job.key)
            taken.append(unit)
            freed += unit.gpu
            if freed < need:
                freed += _released_unclaimed(unit, seen)
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
        kept = [u for u in self.accepted if u.node_names() & used]
        if len(kept) == len(self.accepted) or not kept:
            return
        narrowed = self.replay(kept) if self.spec.move_victims else self.narrow(taken, kept)
        if not narrowed and not self.replay(taken):
            raise AssertionError("a victim set accepted once must be accepted again")


def _released_unclaimed(unit: VictimUnit, seen: set[int]) -> int:
    """GPU being released on the unit's nodes not in ``seen`` (added to it) that nothing is pipelined onto: what a
    preemptor may be pipelined onto there besides what the victims free (KAI's idle-GPU scenario filter counts
    releasing GPU; earlier searches of the action leave some). Read before this search evicts anything there."""
    total = 0
    for task in unit.tasks:
        node = task.node
        if node is None or node.idx in seen:
            continue
        seen.add(node.idx)
        for ok, rel, pipe in zip(node.healthy, node.gpu_rel, node.gpu_pipe, strict=True):
            if ok and rel > pipe:
                total += rel - pipe
    return total


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
