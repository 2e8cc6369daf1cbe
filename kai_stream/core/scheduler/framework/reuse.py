"""Snapshot reuse between cycles: one pool's snapshot kept beside the state (``ClusterState.derived.parked``),
brought up to date with what the fold touched, a session started on it per cycle and undone after it.

``Snapshot.start`` opens a cycle's session on the kept objects (recording what the cycle changes when tracked),
``park`` undoes those changes, ``refresh`` rebuilds only the jobs the fold reported touched (through
``framework/builder.py``), so that a cycle on nearly the same state costs what changed, not every pod. The
functions below are the cycle's entry points: a cold session (``open_session``), a reused one
(``open_tracked_session`` / ``kept_snapshot``) and giving it back (``park_session`` / ``repark``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kai_stream.core.config import SchedulerConfig, config_hash
from kai_stream.core.scheduler.framework.backoff import held_jobs
from kai_stream.core.scheduler.framework.builder import (
    JobBuilder,
    Placed,
    add_request,
    build_snapshot,
    node_info,
    place_running,
    unplace_running,
)
from kai_stream.core.scheduler.framework.info import JobInfo, QueueInfo
from kai_stream.core.scheduler.framework.jobs import job_order, task_order
from kai_stream.core.scheduler.framework.session import CycleContext, PendingInfo, Session
from kai_stream.core.scheduler.timeshare import usage_shares
from kai_stream.core.state import NODE_MARK, ClusterState

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.plugins import Plugin

__all__ = [
    "Snapshot",
    "discard",
    "kept_snapshot",
    "let_go",
    "open_session",
    "open_tracked_session",
    "park_session",
    "repark",
]


@dataclass(eq=False)
class Snapshot:
    """One pool's session as it stands when opened, kept between cycles (``ClusterState.derived.parked``).

    ``base`` holds the persistent working objects; each cycle runs on a ``Session`` that shares them (with a copy
    of the node index) and records what it changes, and ``park`` puts those back. While parked, the fold reports
    to it the keys each event touched (``touched``, into ``dirty``); ``refresh`` then rebuilds only those jobs, so
    a cycle on nearly the same state costs what changed, not every pod.
    """

    pool: str
    config_hash: str
    base: Session
    job_by_key: dict[str, JobInfo]
    pending: set[str]
    builder: JobBuilder
    first_fit: set[str]
    """Nodes whose tasks must all be placed in pod order (see ``JobBuilder.build``): a change there needs a full
    build."""
    classes: dict[object, int]
    """Node class interner (``NodeInfo.class_id``: equal ids for nodes that every static predicate treats alike)."""
    queue_base: list[tuple[QueueInfo, list[int], list[int], list[int]]] = field(default_factory=list)
    dirty: set[str] | None = field(default_factory=set)
    """The job keys (and ``NODE_MARK`` + name of the nodes) the fold touched since the snapshot was parked; None:
    something every job depends on changed (only a full build gives the same snapshot)."""

    def touched(self, key: str | None) -> None:
        """``state.Parked``: the fold touched job ``key`` (or a node; None: everything)."""
        dirty = self.dirty
        if dirty is not None:
            if key is None:
                self.dirty = None
            else:
                dirty.add(key)

    def outgrown(self, touches: int) -> bool:
        """``state.Parked``: whether ``touches`` more touched jobs (each a job of its own, at most) would leave this
        snapshot too dirty to refresh, so that the next cycle builds the whole snapshot (``kept_snapshot``)."""
        dirty = self.dirty
        return dirty is None or not fits_refresh(len(dirty) + touches, len(self.base.jobs))

    @classmethod
    def build(cls, state: ClusterState, config: SchedulerConfig, pool: str, chash: str) -> Snapshot:
        """The whole snapshot of ``pool`` (``builder.build_snapshot``)."""
        base, job_by_key, pending, builder, first_fit, classes = build_snapshot(state, config, pool, chash)
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
            pending_jobs = sorted((self.job_by_key[k] for k in pending), key=job_order)
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
        the states the cycle left; its tasks are now back in the opening state)."""
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
        fresh = node_info(state, name, node.idx, self.classes)
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
                    add_request(base, old, -1)
                for task in old.tasks:
                    node = task.node
                    if node is not None:
                        index.remove(node)
                        unplace_running(base, task)
                        index.add(node)
                    del base.tasks[task.uid]
                removed.append(old)
            pods = derived.by_job.get(key)
            if not pods:
                continue
            placed: list[Placed] = []
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
                place_running(base, task, node, indices, releasing)
                if releasing:
                    listed = base.releasing_tasks[node.name]
                    listed.remove(task)
                    insort(listed, task, key=task_order)
                index.add(node)
            if has_pending:
                self.pending.add(key)
                add_request(base, job, +1)
        base.jobs = _replace_sorted(base.jobs, removed, added)
        queues = {id(j.queue): j.queue for j in removed + added if j.queue is not None}
        for q in queues.values():
            q.jobs = _replace_sorted(q.jobs, [j for j in removed if j.queue is q], [j for j in added if j.queue is q])
        return True


def _replace_sorted(jobs: list[JobInfo], removed: list[JobInfo], added: list[JobInfo]) -> list[JobInfo]:
    """``jobs`` (in ``job_order``) without ``removed`` and with ``added``, still in order."""
    if len(removed) + len(added) <= 32:
        for old in removed:
            at = bisect_left(jobs, job_order(old), key=job_order)
            assert jobs[at] is old
            del jobs[at]
        for job in added:
            insort(jobs, job, key=job_order)
        return jobs
    gone = {id(j) for j in removed}
    kept = [j for j in jobs if id(j) not in gone] if gone else jobs
    kept.extend(sorted(added, key=job_order))
    kept.sort(key=job_order)
    return kept


def open_session(
    state: ClusterState, config: SchedulerConfig, plugins: Sequence[Plugin], *, pool: str, input_offset: int,
    code_version: str,
) -> Session:
    """Build the sorted snapshot of ``pool`` from ``state`` and let ``plugins`` register hooks."""
    chash = config_hash(config)
    snapshot = Snapshot.build(state, config, pool, chash)
    session = snapshot.start(state, config, plugins, input_offset=input_offset, code_version=code_version, track=False)
    let_go(snapshot.base)
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


def fits_refresh(dirty: int, jobs: int) -> bool:
    """Whether a snapshot of ``jobs`` jobs with ``dirty`` of them touched is refreshed rather than built anew: at most
    about half of its jobs (a full build costs less than rebuilding more of them one by one)."""
    return dirty * 2 <= jobs + 64


def kept_snapshot(state: ClusterState, config: SchedulerConfig, *, pool: str) -> Snapshot:
    """The pool's parked snapshot brought up to date with the fold (rebuilt when the fold does not allow it), taken
    out of ``state``: start a tracked session on it, or put it back with ``repark``."""
    derived = state.derived
    parked = derived.parked.pop(pool, None)
    kept = parked if isinstance(parked, Snapshot) else None
    same_config = kept is not None and kept.builder.config is config
    chash = kept.config_hash if kept is not None and same_config else config_hash(config)
    dirty = kept.dirty if kept is not None else None
    if (
        kept is not None
        and kept.config_hash == chash
        and dirty is not None
        and len(derived.indexed or ()) == len(state.pods)
        and fits_refresh(len(dirty), len(kept.base.jobs))
        and kept.refresh(state, config, dirty)
    ):
        return kept
    return Snapshot.build(state, config, pool, chash)


def repark(state: ClusterState, snapshot: Snapshot) -> None:
    """Keep ``snapshot`` (from ``kept_snapshot``, no session started on it) for the pool's next cycle."""
    snapshot.dirty = set()
    state.derived.parked[snapshot.pool] = snapshot


def park_session(state: ClusterState, ssn: Session, snapshot: Snapshot) -> None:
    """Undo the cycle's changes and keep the snapshot for the pool's next cycle on ``state``; ``ssn`` is spent
    (``Session.dispose``)."""
    snapshot.park(ssn)
    ssn.dispose()
    snapshot.dirty = set()
    state.derived.parked[snapshot.pool] = snapshot


def discard(ssn: Session) -> None:
    """Let go of a cold cycle's whole snapshot once its session is closed: ``let_go``, and cut the links that
    make every job, task and queue part of a reference cycle (a job and its tasks, a queue and its jobs, a queue
    and its children), so that the snapshot is freed by reference counting when the caller drops it.

    Otherwise the cyclic collector, resumed right after the cycle while the caller still holds the session,
    traverses and promotes every object of the snapshot, then traverses them again in the older generations
    before they are freed."""
    for job in ssn.jobs:
        job.tasks = []
    for q in ssn.queues.values():
        q.jobs, q.children, q.parent = [], [], None
    let_go(ssn)


def let_go(ssn: Session) -> None:
    """``Session.dispose``, and drop the session's references to the snapshot's objects (which are left as they
    are): for a session nothing reads any more whose snapshot others may still use, such as a cold snapshot's base
    once its cycle's session is started (the base and its index refer to each other, so it would keep the whole
    snapshot alive until the next full collection)."""
    ssn.dispose()
    ssn.nodes, ssn.node_by_name, ssn.queues, ssn.roots = [], {}, {}, []
    ssn.jobs, ssn.tasks, ssn.releasing_tasks, ssn.pending_jobs = [], {}, {}, []
