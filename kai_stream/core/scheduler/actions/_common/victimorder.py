"""KAI's victim queue order (``JobsOrderByQueues`` in victim mode), shared by reclaim and consolidation.

Victims come from the queue that would be scheduled last: at every level of the queue tree the sibling with the
largest queue order key gives next, re-ranked after every victim job, with what the queue gave so far taken off its
dominant share. The key (``victim_key``) is KAI's queue order as the victim search began: over its fair share on
every resource, past its deserved quota, priority, a zero allocatable share in use, dominant share less what it
gave, dominant share, creation time (then the name, for determinism). Allocations are read once, when a queue is
first ranked, so the order does not depend on evictions made while the search runs.
"""

from __future__ import annotations

import heapq
from collections.abc import Container, Iterable

from kai_stream.core.scheduler.actions._common.fairness import INF, UNLIMITED
from kai_stream.core.scheduler.framework.info import QueueInfo, TaskInfo

__all__ = ["VictimOrder", "kai_allocatable", "task_resources"]


def kai_allocatable(q: QueueInfo, r: int) -> int:
    """KAI's allocatable share of one resource: the limit when the quota is unlimited, else max(quota, fair
    share) within the limit (-1: unlimited)."""
    if q.quota[r] == UNLIMITED:
        return q.limit[r]
    cap = max(q.quota[r], q.fair_share[r])
    return cap if q.limit[r] == UNLIMITED else min(q.limit[r], cap)


def task_resources(task: TaskInfo) -> tuple[int, int, int]:
    """What a running task holds (GPU milli-devices, CPU, memory)."""
    return len(task.gpus) * task.gpu_portion, task.cpu, task.mem


def _drf(q: QueueInfo, a: list[int]) -> float:
    worst = 0.0
    for r in range(3):
        if a[r] > 0:
            cap = q.share_cap[r]
            worst = max(worst, a[r] / cap if cap > 0 else INF)
    return worst


def victim_key(q: QueueInfo, held: list[int], given: list[int] | None) -> tuple[object, ...]:
    """KAI's queue order key of ``q`` (the queue scheduled first has the smallest) with its allocation ``held`` as
    the search began and ``given`` (or None) what it gave to the search so far."""
    fair, quota = q.fair_share, q.quota
    left = held if given is None else [held[r] - given[r] for r in range(3)]
    over_utilized = all(fair[r] < held[r] for r in range(3))
    starved = all(quota[r] == UNLIMITED or held[r] <= quota[r] for r in range(3))
    zero_share = any(kai_allocatable(q, r) == 0 and held[r] > 0 for r in range(3))
    return (over_utilized, not starved, -q.priority, zero_share, _drf(q, left), _drf(q, held), q.created)


class _Ranked:
    """A heap entry ordered largest rank first."""

    __slots__ = ("leaf", "rank")

    def __init__(self, rank: tuple[object, ...], leaf: QueueInfo) -> None:
        self.rank = rank
        self.leaf = leaf

    def __lt__(self, other: _Ranked) -> bool:
        return self.rank > other.rank


class VictimOrder:
    """The allocations of the queues as first read, what each gave, and the rank of a leaf's path.

    ``best`` keeps the leaves in a heap: a rank only falls as its queues give (less dominant share left), so an
    entry is at least its leaf's current rank, and the top entry whose rank is still current is the largest."""

    def __init__(self, base: dict[str, tuple[int, tuple[object, ...]]] | None = None) -> None:
        self.base = base
        """Keys of queues that gave nothing, by name with the queue's version (shared across searches)."""
        self.held: dict[str, list[int]] = {}
        self.given: dict[str, list[int]] = {}
        self._paths: dict[str, list[QueueInfo]] = {}
        self._keys: dict[str, tuple[object, ...]] = {}
        self._heap: list[_Ranked] = []

    def held_by(self, q: QueueInfo) -> list[int]:
        a = self.held.get(q.name)
        if a is None:
            a = self.held[q.name] = list(q.allocated)
        return a

    def left(self, q: QueueInfo) -> list[int]:
        """Its allocation as first read, less what it gave."""
        a = self.held_by(q)
        g = self.given.get(q.name)
        return a if g is None else [a[r] - g[r] for r in range(3)]

    def rank(self, leaf: QueueInfo) -> tuple[object, ...]:
        """The key of ``leaf``'s path from the root (the largest gives next)."""
        path = self._paths.get(leaf.name)
        if path is None:
            path = self._paths[leaf.name] = leaf.ancestry()[::-1]
        keys = self._keys
        out: list[object] = []
        for p in path:
            key = keys.get(p.name)
            if key is None:
                given = self.given.get(p.name)
                base = self.base
                if given is None and base is not None:
                    self.held_by(p)
                    entry = base.get(p.name)
                    if entry is None or entry[0] != p.version:
                        entry = base[p.name] = (p.version, victim_key(p, self.held_by(p), None))
                    key = entry[1]
                else:
                    key = victim_key(p, self.held_by(p), given)
                keys[p.name] = key
            out.append(key)
        out.append(leaf.name)
        return tuple(out)

    def rank_all(self, leaves: Iterable[QueueInfo]) -> None:
        """Start ``best`` over ``leaves``."""
        self._heap = [_Ranked(self.rank(q), q) for q in leaves]
        heapq.heapify(self._heap)

    def best(self, alive: Container[str]) -> QueueInfo | None:
        """The leaf of the largest rank among those still ``alive`` (by name), None when none is."""
        heap = self._heap
        while heap:
            top = heap[0]
            if top.leaf.name not in alive:
                heapq.heappop(heap)
                continue
            current = self.rank(top.leaf)
            if current == top.rank:
                return top.leaf
            heapq.heapreplace(heap, _Ranked(current, top.leaf))
        return None

    def give(self, leaf: QueueInfo, tasks: list[TaskInfo]) -> None:
        """Record what ``tasks`` of a job in ``leaf`` take from the leaf and its ancestors."""
        taken = [0, 0, 0]
        for task in tasks:
            g, c, m = task_resources(task)
            taken[0] += g
            taken[1] += c
            taken[2] += m
        q: QueueInfo | None = leaf
        while q is not None:
            self.held_by(q)
            self._keys.pop(q.name, None)
            given = self.given.setdefault(q.name, [0, 0, 0])
            for r in range(3):
                given[r] += taken[r]
            q = q.parent
