"""Typed hook aliases and the one ``Hooks`` bundle that plugins fill when a session opens.

Combinators (as in KAI): orderings are lexicographic keys — the first plugin whose key differs decides,
then creation time, then uid; the first failing predicate stops; job checks stop at the first refusal.
Keys instead of pairwise comparators so that sorting stays O(n log n) in C.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from kai_stream.core.events import PendingCode
from kai_stream.core.scheduler.framework.info import JobInfo, NodeInfo, QueueInfo, TaskInfo

SortKey = tuple[Any, ...]
Strategy = Literal["binpack", "spread"]

JobKeyFn = Callable[[JobInfo], SortKey]
"""Smaller key = scheduled earlier within its queue."""
QueueKeyFn = Callable[[QueueInfo, JobInfo], SortKey]
"""Key of a queue (at any level of the tree) when offering ``job`` next; smaller goes first."""
PredicateFn = Callable[[TaskInfo, NodeInfo], str | None]
"""Static (label/taint/affinity) check: None when the node is acceptable, else the failed predicate's name."""
JobCheckFn = Callable[[JobInfo, list[int]], tuple[PendingCode, str] | None]
"""Refuses a job before placement (limits, deserved quota): (code, human reason) or None."""
JobReadyFn = Callable[[JobInfo, int], bool]
"""Whether a job with ``active`` placed pods may be committed (gang: active >= minMember)."""
VictimFilterFn = Callable[[str, JobInfo, JobInfo], bool]
"""Whether ``action`` may evict pods of the victim job (third) for the preemptor job (second)."""


@dataclass
class Hooks:
    job_keys: list[JobKeyFn] = field(default_factory=list)
    queue_keys: list[QueueKeyFn] = field(default_factory=list)
    predicates: list[tuple[str, PredicateFn]] = field(default_factory=list)
    job_checks: list[JobCheckFn] = field(default_factory=list)
    job_ready: list[JobReadyFn] = field(default_factory=list)
    victim_filters: list[VictimFilterFn] = field(default_factory=list)
    gpu_strategy: Strategy = "binpack"
    cpu_strategy: Strategy = "binpack"

    def job_key(self, job: JobInfo) -> SortKey:
        key: SortKey = ()
        for fn in self.job_keys:
            key += fn(job)
        return (*key, job.created, job.uid)

    def queue_key(self, queue: QueueInfo, job: JobInfo) -> SortKey:
        key: SortKey = ()
        for fn in self.queue_keys:
            key += fn(queue, job)
        return (*key, queue.created, queue.uid, queue.name)

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

    def may_evict(self, action: str, preemptor: JobInfo, victim: JobInfo) -> bool:
        return all(fn(action, preemptor, victim) for fn in self.victim_filters)
