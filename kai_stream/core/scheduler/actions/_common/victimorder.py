"""KAI's victim queue order (``JobsOrderByQueues`` in victim mode), shared by reclaim and consolidation.

Victims come from the queue that would be scheduled last: at every level of the queue tree the sibling with the
largest queue order key gives next, re-ranked after every victim job, with what the queue gave so far taken off its
dominant share. The key (``victim_key``) is KAI's queue order as the victim search began: over its fair share on
every resource, past its deserved quota, priority, a zero allocatable share in use, dominant share less what it
gave, dominant share, creation time (then the name, for determinism). Allocations are read once, when a queue is
first ranked, so the order does not depend on evictions made while the search runs.
"""

from __future__ import annotations

from bisect import insort
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


class _Siblings:
    """The leaves of one parent being ranked: the key path of the parent (None: to be read again) and, sorted, each
    leaf's (key, name, leaf)."""

    __slots__ = ("entries", "parent", "prefix")

    def __init__(self, parent: QueueInfo | None) -> None:
        self.parent = parent
        self.prefix: tuple[object, ...] | None = None
        self.entries: list[tuple[tuple[object, ...], str, QueueInfo]] = []


class VictimOrder:
    """The allocations of the queues as first read, what each gave, and the rank of a leaf's path.

    ``best`` keeps the leaves by parent, each parent's sorted by their own key: a leaf's rank is its parent's key
    path, its key and its name, so the largest rank is the largest of each parent's path followed by its largest
    leaf. ``give`` re-ranks the leaf that gave among its siblings and marks the key paths it changed to be read
    again."""

    def __init__(self, base: dict[str, tuple[int, tuple[object, ...]]] | None = None) -> None:
        self.base = base
        """Keys of queues that gave nothing, by name with the queue's version (shared across searches)."""
        self.held: dict[str, list[int]] = {}
        self.given: dict[str, list[int]] = {}
        self._paths: dict[str, list[QueueInfo]] = {}
        self._keys: dict[str, tuple[object, ...]] = {}
        self._first: dict[str, tuple[object, ...]] = {}
        """Per queue that gave: its key before it gave (``victim_key`` then differs in what is left only)."""
        self._groups: dict[str, _Siblings] = {}
        """Per parent name ("" for the roots): its leaves being ranked."""
        self._under: dict[str, list[_Siblings]] = {}
        """Per queue name: the groups whose parent's key path holds its key."""

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

    def key(self, p: QueueInfo) -> tuple[object, ...]:
        """``victim_key`` of ``p`` as it stands in this order (read once until ``p`` gives)."""
        key = self._keys.get(p.name)
        if key is None:
            given = self.given.get(p.name)
            base = self.base
            if given is None and base is not None:
                held = self.held_by(p)
                entry = base.get(p.name)
                if entry is None or entry[0] != p.version:
                    entry = base[p.name] = (p.version, victim_key(p, held, None))
                key = entry[1]
            else:
                held = self.held_by(p)
                first = self._first.get(p.name)
                if first is None or given is None:
                    key = victim_key(p, held, given)
                else:
                    key = (*first[:4], _drf(p, [held[r] - given[r] for r in range(3)]), *first[5:])
            self._keys[p.name] = key
        return key

    def rank(self, leaf: QueueInfo) -> tuple[object, ...]:
        """The key of ``leaf``'s path from the root (the largest gives next)."""
        path = self._paths.get(leaf.name)
        if path is None:
            path = self._paths[leaf.name] = leaf.ancestry()[::-1]
        return (*[self.key(p) for p in path], leaf.name)

    def rank_all(self, leaves: Iterable[QueueInfo]) -> None:
        """Start ``best`` over ``leaves``."""
        groups: dict[str, _Siblings] = {}
        under: dict[str, list[_Siblings]] = {}
        for leaf in leaves:
            parent = leaf.parent
            name = "" if parent is None else parent.name
            group = groups.get(name)
            if group is None:
                group = groups[name] = _Siblings(parent)
                if parent is not None:
                    for p in parent.ancestry():
                        self.key(p)
                        under.setdefault(p.name, []).append(group)
            group.entries.append((self.key(leaf), leaf.name, leaf))
        for group in groups.values():
            group.entries.sort()
        self._groups, self._under = groups, under

    def _prefix(self, group: _Siblings) -> tuple[object, ...]:
        prefix = group.prefix
        if prefix is None:
            parent = group.parent
            prefix = group.prefix = () if parent is None else self.rank(parent)[:-1]
        return prefix

    def best(self, alive: Container[str]) -> QueueInfo | None:
        """The leaf of the largest rank among those still ``alive`` (by name), None when none is."""
        found: QueueInfo | None = None
        top: tuple[object, ...] = ()
        for group in self._groups.values():
            entries = group.entries
            while entries and entries[-1][1] not in alive:
                entries.pop()
            if not entries:
                continue
            key, name, leaf = entries[-1]
            rank = (*self._prefix(group), key, name)
            if found is None or rank > top:
                found, top = leaf, rank
        return found

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
            key = self._keys.pop(q.name, None)
            if key is not None and q.name not in self.given:
                self._first[q.name] = key
            given = self.given.setdefault(q.name, [0, 0, 0])
            for r in range(3):
                given[r] += taken[r]
            for group in self._under.get(q.name, ()):
                group.prefix = None
            q = q.parent
        parent = leaf.parent
        siblings = self._groups.get("" if parent is None else parent.name)
        if siblings is not None:
            entries = siblings.entries
            for i, entry in enumerate(entries):
                if entry[2] is leaf:
                    del entries[i]
                    insort(entries, (self.key(leaf), leaf.name, leaf))
                    break
