"""The statement: tentative changes to a session with an undo log; ``commit`` returns decisions, no I/O.

Operations: ``allocate`` (bind onto free capacity), ``pipeline`` (onto capacity being released),
``evict`` (mark a running task releasing, victims for reclaim/preempt/consolidation; a task pipelined earlier in
the session gives up its nomination: its ``PodPipelined`` is withdrawn at commit), ``unevict`` (a victim of
this statement keeps running after all: its eviction and the unevict leave no decision, and pipelined pods that
waited for it no longer name it). ``checkpoint`` marks
the log, ``rollback(cp)`` undoes back to it, ``discard`` undoes everything, ``withdraw_evictions`` undoes some
evictions out of order (a log of evictions only), ``commit`` turns the surviving
operations into ``BindRequested`` / ``PodPipelined`` / ``EvictionRequested`` decisions (in operation order),
appends them to the session and returns them. Victim searches can evict and re-place tentatively, then
roll back to try the next set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from kai_stream.core.events import ActionName, BindRequested, Decision, EvictionRequested, PodPipelined, stable_id
from kai_stream.core.scheduler.framework.info import PIPELINED, TaskInfo
from kai_stream.core.scheduler.framework.nodeindex import Placement

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session

__all__ = ["Operation", "Statement"]


@dataclass(slots=True, init=False)
class Operation:
    kind: Literal["allocate", "pipeline", "evict", "unevict"]
    task: TaskInfo
    before: int = 0
    previous: str = ""
    waiting_for: tuple[str, ...] = ()
    preemptor: str | None = None
    preemptor_queue: str | None = None
    reason: str = ""
    details: dict[str, str] = field(default_factory=dict)

    def __init__(
        self,
        kind: Literal["allocate", "pipeline", "evict", "unevict"],
        task: TaskInfo,
        before: int = 0,
        previous: str = "",
        waiting_for: tuple[str, ...] = (),
        preemptor: str | None = None,
        reason: str = "",
        details: dict[str, str] | None = None,
        preemptor_queue: str | None = None,
    ) -> None:
        self.kind, self.task, self.before, self.previous, self.waiting_for = kind, task, before, previous, waiting_for
        self.preemptor, self.reason, self.details = preemptor, reason, {} if details is None else details
        self.preemptor_queue = preemptor_queue


class Statement:
    def __init__(self, session: Session, action: str) -> None:
        self.ssn = session
        self.action: ActionName = action  # type: ignore[assignment]
        self.ops: list[Operation] = []

    # ------------------------------------------------------------------ operations

    def allocate(self, task: TaskInfo, placement: Placement, reason: str = "") -> None:
        """Place ``task``; a placement on releasing capacity becomes a pipeline operation."""
        if placement.pipelined:
            self.pipeline(task, placement, reason)
            return
        before = self.ssn.state_id
        self.ssn.place(task, placement.node, placement.gpus, placement.portion, pipelined=False)
        self.ops.append(Operation("allocate", task, before, reason=reason))

    def pipeline(self, task: TaskInfo, placement: Placement, reason: str = "") -> None:
        before = self.ssn.state_id
        self.ssn.place(task, placement.node, placement.gpus, placement.portion, pipelined=True)
        self.ops.append(Operation("pipeline", task, before, waiting_for=placement.waiting_for, reason=reason))

    def evict(
        self,
        task: TaskInfo,
        *,
        preemptor: str | None = None,
        reason: str = "",
        details: dict[str, str] | None = None,
        preemptor_queue: str | None = None,
    ) -> None:
        before = self.ssn.state_id
        previous = self.ssn.release(task)
        self.ops.append(
            Operation(
                "evict", task, before, previous=previous, preemptor=preemptor, reason=reason, details=details or {},
                preemptor_queue=preemptor_queue,
            )
        )

    def unevict(self, task: TaskInfo) -> None:
        """Undo this statement's eviction of ``task`` as a new operation (rolled back by evicting it again)."""
        previous = next(op.previous for op in reversed(self.ops) if op.kind == "evict" and op.task is task)
        before = self.ssn.state_id
        self.ssn.unrelease(task, previous)
        self.ops.append(Operation("unevict", task, before, previous=previous))

    def convert_to_pipeline(self, tasks: list[TaskInfo]) -> None:
        """Turn this statement's allocations of ``tasks`` into pipeline operations (a job waiting as one)."""
        wanted = {t.uid for t in tasks}
        for op in self.ops:
            if op.kind == "allocate" and op.task.uid in wanted:
                task = op.task
                node, gpus, portion = task.node, task.gpus, task.gpu_portion
                assert node is not None
                self.ssn.unplace(task)
                self.ssn.place(task, node, gpus, portion, pipelined=True)
                op.kind = "pipeline"

    # ------------------------------------------------------------------ undo log

    def checkpoint(self) -> int:
        return len(self.ops)

    def rollback(self, checkpoint: int) -> None:
        while len(self.ops) > checkpoint:
            op = self.ops.pop()
            if op.kind == "evict":
                self.ssn.unrelease(op.task, op.previous)
            elif op.kind == "unevict":
                self.ssn.release(op.task)
            else:
                self.ssn.unplace(op.task)
            self.ssn.state_id = op.before

    def discard(self) -> None:
        self.rollback(0)

    def withdraw_evictions(self, tasks: set[int]) -> None:
        """Undo the evictions of ``tasks`` (by ``id``; the log must hold evictions only), wherever they are in the
        log: the others stay, in order, as if only they had been made (evictions only add to sums). Their
        rollback points get fresh state ids, but for the first, whose is the opening state's."""
        ops = self.ops
        if not ops:
            return
        start = ops[0].before
        for op in reversed(ops):
            assert op.kind == "evict"
            if id(op.task) in tasks:
                self.ssn.unrelease(op.task, op.previous)
        self.ops = [op for op in ops if id(op.task) not in tasks]
        if self.ops:
            self.ops[0].before = start
            for op in self.ops[1:]:
                self.ssn.touch()
                op.before = self.ssn.state_id
        self.ssn.touch()

    # ------------------------------------------------------------------ commit

    def commit(self) -> list[Decision]:
        """Decisions for the surviving operations (in order); appended to the session's decisions too."""
        ctx = self.ssn.ctx
        out: list[Decision] = []
        kept = {id(op.task): op.task.key for op in self.ops if op.kind == "unevict"}
        for op in self.ops:
            task = op.task
            if op.kind == "unevict" or (op.kind == "evict" and id(task) in kept):
                continue
            if op.kind == "evict" and op.previous == PIPELINED:
                self._retract_pipeline(task)
                continue
            job = task.job
            node = task.node
            assert node is not None
            common = {
                "ts": ctx.ts,
                "pool": ctx.pool,
                "input_offset": ctx.input_offset,
                "config_hash": ctx.config_hash,
                "code_version": ctx.code_version,
                "action": self.action,
                "namespace": task.namespace,
                "name": task.name,
                "uid": task.uid,
                "job": job.key,
                "queue": job.queue_name,
                "reason": op.reason,
            }
            decision: Decision
            if op.kind == "allocate":
                decision = BindRequested(
                    decision_id=stable_id(ctx.pool, str(ctx.input_offset), task.uid, "BindRequested"),
                    node=node.name,
                    gpu_indices=task.gpus,
                    gpu_fraction_milli=task.gpu_portion if task.gpus and task.gpu_portion < 1000 else None,
                    **common,
                )
            elif op.kind == "pipeline":
                if task.prev_pipelined == (node.name, task.gpus) and task.status == PIPELINED:
                    continue
                waiting_for = op.waiting_for
                if kept:
                    running = set(kept.values())
                    waiting_for = tuple(key for key in waiting_for if key not in running)
                decision = PodPipelined(
                    decision_id=stable_id(ctx.pool, str(ctx.input_offset), task.uid, "PodPipelined"),
                    node=node.name,
                    gpu_indices=task.gpus,
                    waiting_for=waiting_for,
                    **common,
                )
            else:
                decision = EvictionRequested(
                    decision_id=stable_id(ctx.pool, str(ctx.input_offset), task.uid, "EvictionRequested"),
                    node=node.name,
                    preemptor=op.preemptor,
                    preemptor_queue=op.preemptor_queue,
                    details=op.details,
                    **common,
                )
            out.append(decision)
            self.ssn.pending.pop(task.uid, None)
        self.ops = []
        self.ssn.decisions.extend(out)
        return out

    def _retract_pipeline(self, task: TaskInfo) -> None:
        """An eviction of a task pipelined earlier in this session: its ``PodPipelined`` is withdrawn, so the pod
        stays pending with no node (a nomination from an earlier cycle is never taken: ``victims.takeable``)."""
        decisions = self.ssn.decisions
        for i in range(len(decisions) - 1, -1, -1):
            d = decisions[i]
            if isinstance(d, PodPipelined) and d.uid == task.uid:
                del decisions[i]
                return
