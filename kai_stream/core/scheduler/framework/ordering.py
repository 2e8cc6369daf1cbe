"""Which job goes next: queues ordered level by level through the tree by the queue-order hooks, jobs by the
job-order hooks (KAI ``JobsOrderByQueues``, ``traverseToLeaf``).

Every queue with pending jobs below it is a node: a leaf holds its jobs in job order, any other queue a heap of
its children with pending jobs (the roots are the children of one virtual node). A node's key is the queue-order
key of its queue offered its best job: a leaf's next job, else the best job of the child on top of its heap. So
siblings are compared with their own keys, each computed with its own best job, and the next job is found by
walking down from the roots, taking the top child at every level. A heap with a single child compares nothing,
so that child's key is not computed (KAI compares a queue only with its siblings).

A stored key is checked lazily when its node comes to the top of its parent's heap (KAI's ``needsReorder``,
``Fix(0)``): it went stale when its queue changed since (``QueueInfo.version``) or when its best job is another
one that the queue-key plugins do not see alike (``Hooks.queue_key_signature``; without one, another job or a new
version of it). A stale key is recomputed and the node sifted down. Keys only get worse as a cycle allocates, and
what a pop changes is on the path it took (all at the tops of their heaps), so this is the order a full re-sort
would give. A node with nothing left is dropped when it comes to the top.

``next_alike`` takes a leaf's following job without walking the tree when ``pop`` would return it anyway: nothing
changed since the leaf's last job was popped and the following job reads alike for the queue keys, so every key
on the path is the same and the path is still the least. ``in_order`` is the loop every action runs: each job
after the previous one was handled, by ``next_alike`` where it applies, else by ``requeue`` and ``pop``.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Hashable, Iterator
from typing import TYPE_CHECKING

from kai_stream.core.scheduler.framework.hooks import SortKey
from kai_stream.core.scheduler.framework.info import JobInfo, QueueInfo

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session

__all__ = ["JobsByQueue"]


class _Node:
    """One queue of the tree: a leaf's jobs (``jobs``, the next at ``next``) or a heap of child nodes, and the key
    it holds in its parent's heap with what that key was computed from."""

    __slots__ = ("heap", "job", "job_version", "jobs", "key", "name", "next", "queue", "signature", "version")

    def __init__(self, queue: QueueInfo | None, jobs: list[JobInfo] | None) -> None:
        self.queue = queue
        self.name = queue.name if queue is not None else ""
        self.jobs = jobs
        self.next = 0
        self.heap: list[tuple[SortKey, str, _Node]] = []
        self.key: SortKey = ()
        self.job: JobInfo | None = None
        """The best job the key was computed with, its version then and its queue-key signature; the queue's
        version then."""
        self.job_version = -1
        self.version = -1
        self.signature: Hashable = None


Entry = tuple[SortKey, str, _Node]


class JobsByQueue:
    def __init__(self, session: Session, jobs: list[JobInfo]) -> None:
        self.ssn = session
        self._leaves: dict[str, _Node] = {}
        nodes: dict[str, _Node] = {}
        for job in jobs:
            queue = job.queue
            if queue is None:
                continue
            leaf = self._leaves.get(queue.name)
            if leaf is None:
                leaf = self._leaves[queue.name] = nodes[queue.name] = _Node(queue, [])
            assert leaf.jobs is not None
            leaf.jobs.append(job)
        self._root = _Node(None, None)
        children: dict[str, list[_Node]] = {}
        for name in sorted(self._leaves):
            leaf = self._leaves[name]
            assert leaf.jobs is not None
            leaf.jobs.sort(key=session.job_key)
            node, queue = leaf, leaf.queue
            while queue is not None:
                parent = queue.parent
                parent_name = parent.name if parent is not None else ""
                children.setdefault(parent_name, []).append(node)
                if parent is None or parent.name in nodes:
                    break
                node = nodes[parent.name] = _Node(parent, None)
                queue = parent
        by_depth = sorted(nodes.values(), key=lambda n: -len(n.queue.ancestry()) if n.queue is not None else 0)
        for node in [*by_depth, self._root]:
            below = children.get(node.name)
            if node.jobs is None and below:
                node.heap = [self._entry(child) if len(below) > 1 else ((), child.name, child) for child in below]
                heapq.heapify(node.heap)
        self._popped: tuple[JobInfo, int] | None = None
        """The last job ``pop`` or ``next_alike`` returned and the queue epoch then."""
        self._signature: tuple[JobInfo, object] | None = None
        """The last job ``next_alike`` took and its queue-key signature (the next call's ``job``, usually)."""
        self.followed = False
        """Whether the job ``in_order`` yielded last was taken by ``next_alike`` after the one before it (nothing
        changed any queue in between)."""

    def _entry(self, node: _Node) -> Entry:
        """``node``'s heap entry with a fresh key (its best job exists: it was just built or checked)."""
        job = self._best(node)
        assert job is not None and node.queue is not None
        node.key = self.ssn.hooks.queue_key(node.queue, job)
        node.job, node.job_version, node.version = job, job.version, node.queue.version
        node.signature = self.ssn.hooks.queue_key_signature(job)
        return node.key, node.name, node

    def _stale(self, node: _Node, job: JobInfo) -> bool:
        assert node.queue is not None
        if node.queue.version != node.version:
            return True
        signature = self.ssn.hooks.queue_key_signature(job)
        if signature is not None:
            return signature != node.signature
        return node.job is not job or job.version != node.job_version

    def _best(self, node: _Node) -> JobInfo | None:
        """``node``'s best job, with the heaps on the way to it checked (stale tops re-keyed, empty ones
        dropped); None when nothing is left below it."""
        jobs = node.jobs
        if jobs is not None:
            i = node.next
            return jobs[i] if i < len(jobs) else None
        heap = node.heap
        while heap:
            child = heap[0][2]
            job = self._best(child)
            if job is None:
                heapq.heappop(heap)
                continue
            if len(heap) > 1 and self._stale(child, job):
                old = child.key
                entry = self._entry(child)
                if entry[0] != old:
                    heapq.heapreplace(heap, entry)
                    continue
            return job
        return None

    def pop(self) -> JobInfo | None:
        """The next job to try, or None when every queue is exhausted."""
        if self._best(self._root) is None:
            return None
        node = self._root
        while node.jobs is None:
            node = node.heap[0][2]
        job = node.jobs[node.next]
        node.next += 1
        self._popped = (job, self.ssn.queue_epoch)
        return job

    def next_alike(self, job: JobInfo) -> JobInfo | None:
        """The job ``pop`` would return next, taken without the tree, when that is sure to be the following job of
        ``job``'s leaf: ``job`` is the last one taken and not requeued, no queue changed since, and the following
        job has ``job``'s queue-key signature (so every key on the leaf's path is the same, and the path is still
        the least). None otherwise (then ``requeue`` and ``pop`` as usual)."""
        popped = self._popped
        if popped is None or popped[0] is not job or popped[1] != self.ssn.queue_epoch or job.queue is None:
            return None
        leaf = self._leaves[job.queue.name]
        jobs = leaf.jobs
        assert jobs is not None
        i = leaf.next
        if i >= len(jobs):
            return None
        following = jobs[i]
        signature = self.ssn.hooks.queue_key_signature
        known = self._signature
        mine = known[1] if known is not None and known[0] is job else signature(job)
        if mine is None or signature(following) != mine:
            return None
        self._signature = (following, mine)
        leaf.next = i + 1
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
        part of its tasks goes in line again (KAI ``PushJob``). Call it before the loop takes the next job (its
        leaf is still in the tree then: a node is dropped only when it comes to the top with nothing left)."""
        if job.queue is None:
            return
        leaf = self._leaves[job.queue.name]
        jobs = leaf.jobs
        assert jobs is not None
        at = bisect.bisect_right(jobs, self.ssn.job_key(job), lo=leaf.next, key=self.ssn.job_key)
        jobs.insert(at, job)
        self._popped = None

    def requeue(self, job: JobInfo) -> None:
        """After ``job`` was handled: the next ``pop`` walks the tree again (and re-keys what changed)."""
        self._popped = None
