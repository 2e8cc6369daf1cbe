"""Typed hook aliases and the one ``Hooks`` bundle that plugins fill when a session opens.

Combinators (as in KAI): orderings are lexicographic keys — the first plugin whose key differs decides,
then creation time, then uid; the first failing predicate stops; job checks stop at the first refusal;
victim scopes give the narrowest answer ("none" < "surplus" < "all"). Keys instead of pairwise comparators so
that sorting stays O(n log n) in C.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from kai_stream.core.events import PendingCode
from kai_stream.core.scheduler.framework.info import JobInfo, NodeInfo, QueueInfo, TaskInfo

SortKey = tuple[Any, ...]

JobKeyFn = Callable[[JobInfo], SortKey]
"""Smaller key = scheduled earlier within its queue."""
QueueKeyFn = Callable[[QueueInfo, JobInfo], SortKey]
"""Key of a queue (at any level of the tree) when offering ``job`` next; smaller goes first."""
QueueKeyReadsFn = Callable[[JobInfo], Hashable]
"""What of the job one queue-key plugin reads: its key is a function of the queue and this value only. When
every queue-key plugin declares one, jobs with equal values share their path keys (see ``JobsByQueue``). The
value may change only with the job's tasks (``JobInfo.version``; proportion reads ``Session.ranking_request``, the
job's request at its version, nomination the nominations the snapshot holds): ``Hooks.queue_key_signature`` keeps
it per job and version."""
PredicateFn = Callable[[TaskInfo, NodeInfo], str | None]
"""Static (label/taint/affinity) check: None when the node is acceptable, else the failed predicate's name."""
JobCheckFn = Callable[[JobInfo, list[int]], tuple[PendingCode, str] | None]
"""Refuses a job before placement (limits, deserved quota): (code, human reason) or None."""
JobReadyFn = Callable[[JobInfo, int], bool]
"""Whether a job with ``active`` placed pods may be committed (gang: active >= minMember)."""
EvictScope = Literal["all", "surplus", "none"]
"""What a victim job may give: every running pod, only its surplus pods (those above ``minMember``; never its
gang core), or nothing."""
VictimJudgeFn = Callable[[JobInfo], EvictScope]
"""What a victim job of one queue may give to one action and preemptor leaf (see ``VictimScopeFn``)."""
VictimScopeFn = Callable[[str, JobInfo, QueueInfo], VictimJudgeFn | None]
"""For ``action`` and the preemptor job (second), the judge of the victim jobs of a victim queue (third); None:
every one of them may be taken whole. Asked at every victim search, so it should be cheap (memoized). The judge
may depend on the preemptor only through its leaf queue, and otherwise on the victim job and event time: victim
searches keep one victim list per (victim queue, judges) for the whole action run and ask a judge once per job
and list, so a scope should return the same judge object wherever its answer is the same (min-runtime: one
judge per resolved limit)."""


class NodeOrder(Protocol):
    """Which of the nodes and devices that fit the node index offers first (the node-order plugin's strategy);
    the index walks its own structures in the order this gives, ties by node index."""

    def gpu_buckets(self, need: int, size: int) -> range:
        """Free-whole-GPU counts (``need`` .. ``size - 1``) in the order a whole-GPU task looks at them."""
        ...

    def shared_first(self) -> bool:
        """Whether a fraction goes to a partly used device (most used first) before an idle one."""
        ...

    def devices(self, fitting: list[tuple[int, int]], count: int) -> tuple[int, ...]:
        """``count`` of the ``fitting`` (free portion, device) pairs for a fractional task, in device order."""
        ...

    def leftover(self, left: int, gpu_task: bool) -> int:
        """Scan key of a feasible node that keeps ``left`` (free GPU portions or millicores): smaller first."""
        ...


@dataclass
class Hooks:
    job_keys: list[JobKeyFn] = field(default_factory=list)
    pending_job_keys: list[JobKeyFn] = field(default_factory=list)
    """Keys that order pending jobs only, after ``job_keys`` (how far a job got in the cycle's passes): the
    victim searches order running jobs by ``job_key`` alone."""
    queue_keys: list[QueueKeyFn] = field(default_factory=list)
    queue_key_reads: list[QueueKeyReadsFn] = field(default_factory=list)
    predicates: list[tuple[str, PredicateFn]] = field(default_factory=list)
    job_checks: list[JobCheckFn] = field(default_factory=list)
    job_ready: list[JobReadyFn] = field(default_factory=list)
    victim_scopes: list[VictimScopeFn] = field(default_factory=list)
    node_order: NodeOrder | None = None
    """None: the node index's own order, first fit (fewest free GPUs, most used device, least left)."""

    def job_key(self, job: JobInfo) -> SortKey:
        key: SortKey = ()
        for fn in self.job_keys:
            key += fn(job)
        return (*key, job.created, job.uid)

    def pending_job_key(self, job: JobInfo) -> SortKey:
        key: SortKey = ()
        for fn in self.job_keys:
            key += fn(job)
        for fn in self.pending_job_keys:
            key += fn(job)
        return (*key, job.created, job.uid)

    def queue_key(self, queue: QueueInfo, job: JobInfo) -> SortKey:
        key: SortKey = ()
        for fn in self.queue_keys:
            key += fn(queue, job)
        return (*key, queue.created, queue.uid, queue.name)

    def queue_key_signature(self, job: JobInfo) -> tuple[Hashable, ...] | None:
        """Everything of ``job`` that ``queue_key`` reads, or None when a queue-key plugin declared nothing."""
        if job.signature_at == job.version:
            return job.signature_memo
        reads = self.queue_key_reads
        if len(reads) != len(self.queue_keys):
            return None
        signature = tuple([fn(job) for fn in reads])
        job.signature_memo, job.signature_at = signature, job.version
        return signature

    def predicate(self, task: TaskInfo, node: NodeInfo) -> str | None:
        for _, fn in self.predicates:
            failed = fn(task, node)
            if failed is not None:
                return failed
        return None

    def check_job(self, job: JobInfo, request: list[int]) -> tuple[PendingCode, str] | None:
        for fn in self.job_checks:
            refused = fn(job, request)
            if refused is not None:
                return refused
        return None

    def ready(self, job: JobInfo, active: int) -> bool:
        return all(fn(job, active) for fn in self.job_ready)

    def victim_judges(self, action: str, preemptor: JobInfo, victim_queue: QueueInfo) -> tuple[VictimJudgeFn, ...]:
        """The judges of the victim scopes for victim jobs of ``victim_queue`` (empty: all may be taken whole)."""
        judges: list[VictimJudgeFn] = []
        for fn in self.victim_scopes:
            judge = fn(action, preemptor, victim_queue)
            if judge is not None:
                judges.append(judge)
        return tuple(judges)

    def evict_scope(self, action: str, preemptor: JobInfo, victim: JobInfo) -> EvictScope:
        """What ``action`` may evict of ``victim`` for ``preemptor``: the narrowest answer of the victim scopes."""
        if not self.victim_scopes or victim.queue is None:
            return "all"
        return narrowest(self.victim_judges(action, preemptor, victim.queue), victim)

    def may_evict(self, action: str, preemptor: JobInfo, victim: JobInfo) -> bool:
        """Whether ``action`` may evict the whole victim job for the preemptor."""
        return not self.victim_scopes or self.evict_scope(action, preemptor, victim) == "all"


def narrowest(judges: tuple[VictimJudgeFn, ...], victim: JobInfo) -> EvictScope:
    """The narrowest answer of ``judges`` for ``victim`` ("none" as soon as one refuses)."""
    scope: EvictScope = "all"
    for judge in judges:
        answer = judge(victim)
        if answer == "none":
            return "none"
        if answer == "surplus":
            scope = "surplus"
    return scope
