"""Which job goes next: queues ordered through the tree by the queue-order hooks, jobs by the job-order hooks.

Each leaf queue with pending jobs has one heap entry keyed by the path of queue keys from the root down to
the leaf (so siblings are compared at every level, parents first), computed with that leaf's head job.
Keys only get worse as a cycle allocates (allocation grows), so an entry is checked lazily when it comes
to the top: if a queue on its path changed since the push (``QueueInfo.version``) and its key went stale,
it is re-pushed with the fresh key.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from kai_stream.core.scheduler.framework.hooks import SortKey
from kai_stream.core.scheduler.framework.info import JobInfo, QueueInfo

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session

__all__ = ["JobsByQueue"]


class JobsByQueue:
    def __init__(self, session: Session, jobs: list[JobInfo]) -> None:
        self.ssn = session
        self._jobs: dict[str, list[JobInfo]] = {}
        self._next: dict[str, int] = {}
        self._leaves: dict[str, QueueInfo] = {}
        hooks = session.hooks
        for job in jobs:
            if job.queue is None:
                continue
            self._jobs.setdefault(job.queue.name, []).append(job)
            self._leaves[job.queue.name] = job.queue
        for name in self._jobs:
            self._jobs[name].sort(key=hooks.job_key)
            self._next[name] = 0
        self._heap: list[tuple[SortKey, str, tuple[int, ...]]] = []
        self._paths: dict[str, list[QueueInfo]] = {}
        for name, leaf in self._leaves.items():
            path = leaf.ancestry()
            path.reverse()
            self._paths[name] = path
        for name in sorted(self._jobs):
            self._push(name)

    def _key(self, name: str, job: JobInfo) -> SortKey:
        key = self.ssn.hooks.queue_key
        return tuple(key(q, job) for q in self._paths[name])

    def _versions(self, name: str) -> tuple[int, ...]:
        return tuple(q.version for q in self._paths[name])

    def _head(self, name: str) -> JobInfo | None:
        jobs = self._jobs[name]
        i = self._next[name]
        return jobs[i] if i < len(jobs) else None

    def _push(self, name: str) -> None:
        job = self._head(name)
        if job is not None:
            heapq.heappush(self._heap, (self._key(name, job), name, self._versions(name)))

    def pop(self) -> JobInfo | None:
        """The next job to try, or None when every queue is exhausted."""
        heap = self._heap
        while heap:
            key, name, versions = heap[0]
            job = self._head(name)
            if job is None:
                heapq.heappop(heap)
                continue
            now = self._versions(name)
            if now != versions:
                fresh = self._key(name, job)
                if fresh != key:
                    heapq.heapreplace(heap, (fresh, name, now))
                    continue
            heapq.heappop(heap)
            self._next[name] += 1
            return job
        return None

    def requeue(self, job: JobInfo) -> None:
        """Put the job's queue back in line (with its next job) after ``job`` was handled."""
        if job.queue is not None:
            self._push(job.queue.name)
