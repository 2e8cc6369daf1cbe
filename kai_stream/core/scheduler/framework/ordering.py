"""Which job goes next: queues ordered through the tree by the queue-order hooks, jobs by the job-order hooks.

Each leaf queue with pending jobs has one heap entry keyed by the path of queue keys from the root down to
the leaf (so siblings are compared at every level, parents first), computed with that leaf's head job. A level
where the queue has no sibling with pending jobs below it (e.g. a single department over every queue) is left
out of the path: KAI compares a queue only with its siblings, never with itself under another leaf's job.
Keys only get worse as a cycle allocates (allocation grows), so an entry is checked lazily when it comes
to the top: if a queue on its path changed since the push (``QueueInfo.version``) and its key went stale,
it is re-pushed with the fresh key. The session's ``queue_epoch`` says cheaply that no queue changed at all.

``next_alike`` takes a leaf's following job without the heap when ``pop`` would return it anyway: nothing
changed since the leaf's last job was popped and the following job reads alike for the queue keys, so the
leaf's key is the same and it is still the least. ``in_order`` is the loop every action runs: each job after
the previous one was handled, by ``next_alike`` where it applies, else by ``requeue`` and ``pop``.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator
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
        for job in jobs:
            if job.queue is None:
                continue
            self._jobs.setdefault(job.queue.name, []).append(job)
            self._leaves[job.queue.name] = job.queue
        for name in self._jobs:
            self._jobs[name].sort(key=session.job_key)
            self._next[name] = 0
        self._heap: list[tuple[SortKey, str, tuple[int, ...], int]] = []
        self._paths: dict[str, list[QueueInfo]] = {}
        self._popped: tuple[JobInfo, int] | None = None
        """The last job ``pop`` or ``next_alike`` returned and the queue epoch then."""
        self._signature: tuple[JobInfo, object] | None = None
        """The last job ``next_alike`` took and its queue-key signature (the next call's ``job``, usually)."""
        self.followed = False
        """Whether the job ``in_order`` yielded last was taken by ``next_alike`` after the one before it (nothing
        changed any queue in between)."""
        on_paths = {q.name: q for leaf in self._leaves.values() for q in leaf.ancestry()}
        siblings: dict[str | None, int] = {}
        for q in on_paths.values():
            siblings[q.parent_name] = siblings.get(q.parent_name, 0) + 1
        for name, leaf in self._leaves.items():
            path = [q for q in reversed(leaf.ancestry()) if siblings[q.parent_name] > 1]
            self._paths[name] = path or [leaf]
        for name in sorted(self._jobs):
            self._push(name)

    def _key(self, name: str, job: JobInfo) -> tuple[SortKey, tuple[int, ...], int]:
        """The job's path key with the path versions and the session's queue epoch it holds for (memoised on the
        session: recomputed only when a queue on the path changed since). A shared key computed at the current
        epoch holds the current versions, so they are not read again."""
        ssn = self.ssn
        epoch = ssn.queue_epoch
        path = self._paths[name]
        memo = ssn.order_keys.get(job)
        versions: tuple[int, ...] | None = None
        if memo is not None:
            if memo[0] == epoch:
                return memo[2], memo[1], epoch
            versions = tuple([q.version for q in path])
            if memo[1] == versions:
                ssn.order_keys[job] = (epoch, versions, memo[2])
                return memo[2], versions, epoch
        signature = ssn.hooks.queue_key_signature(job)
        if signature is not None:
            shared = ssn.path_keys.get((name, signature))
            if shared is not None:
                if shared[0] == epoch:
                    ssn.order_keys[job] = shared
                    return shared[2], shared[1], epoch
                if versions is None:
                    versions = tuple([q.version for q in path])
                if shared[1] == versions:
                    ssn.order_keys[job] = (epoch, versions, shared[2])
                    return shared[2], versions, epoch
        if versions is None:
            versions = tuple([q.version for q in path])
        queue_key = ssn.hooks.queue_key
        key = tuple([queue_key(q, job) for q in path])
        ssn.order_keys[job] = (epoch, versions, key)
        if signature is not None:
            ssn.path_keys[(name, signature)] = (epoch, versions, key)
        return key, versions, epoch

    def _push(self, name: str) -> None:
        jobs = self._jobs[name]
        i = self._next[name]
        if i < len(jobs):
            key, versions, epoch = self._key(name, jobs[i])
            heapq.heappush(self._heap, (key, name, versions, epoch))

    def pop(self) -> JobInfo | None:
        """The next job to try, or None when every queue is exhausted."""
        heap = self._heap
        while heap:
            key, name, versions, epoch = heap[0]
            jobs = self._jobs[name]
            i = self._next[name]
            if i >= len(jobs):
                heapq.heappop(heap)
                continue
            job = jobs[i]
            if epoch != self.ssn.queue_epoch:
                fresh, now, epoch = self._key(name, job)
                if now != versions and fresh != key:
                    heapq.heapreplace(heap, (fresh, name, now, epoch))
                    continue
            heapq.heappop(heap)
            self._next[name] += 1
            self._popped = (job, self.ssn.queue_epoch)
            return job
        return None

    def next_alike(self, job: JobInfo) -> JobInfo | None:
        """The job ``pop`` would return next, taken without the heap, when that is sure to be the following job of
        ``job``'s leaf: ``job`` is the last one taken and not requeued, no queue changed since, and the following
        job has ``job``'s queue-key signature (so the leaf keeps its key, which was the least). None otherwise
        (then ``requeue`` and ``pop`` as usual)."""
        popped = self._popped
        if popped is None or popped[0] is not job or popped[1] != self.ssn.queue_epoch or job.queue is None:
            return None
        name = job.queue.name
        jobs = self._jobs[name]
        i = self._next[name]
        if i >= len(jobs):
            return None
        following = jobs[i]
        signature = self.ssn.hooks.queue_key_signature
        known = self._signature
        mine = known[1] if known is not None and known[0] is job else signature(job)
        if mine is None or signature(following) != mine:
            return None
        self._signature = (following, mine)
        self._next[name] = i + 1
        self._popped = (following, popped[1])
        return following

    def in_order(self) -> Iterator[JobInfo]:
        """Every job in turn, each one after the caller handled the previous one (its loop body ran)."""
        job = self.pop()
        while job is not None:
            yield job
            following = self.next_alike(job)
            self.followed = following is not None
            if following is None:
                self.requeue(job)
                following = self.pop()
            job = following

    def push_back(self, job: JobInfo) -> None:
        """Put ``job`` back among its leaf's jobs still to come, where its (new) job key places it: a job that got
        part of its tasks goes in line again (KAI ``PushJob``). Call it before the loop takes the next job."""
        if job.queue is None:
            return
        name = job.queue.name
        jobs = self._jobs[name]
        i = self._next[name]
        at = bisect.bisect_right(jobs, self.ssn.job_key(job), lo=i, key=self.ssn.job_key)
        jobs.insert(at, job)
        self._popped = None

    def requeue(self, job: JobInfo) -> None:
        """Put the job's queue back in line (with its next job) after ``job`` was handled."""
        self._popped = None
        if job.queue is not None:
            self._push(job.queue.name)
