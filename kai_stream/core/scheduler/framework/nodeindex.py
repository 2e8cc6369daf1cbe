"""Where a task can go: an index of free capacity so that placing a pod is not a scan of every node.

* ``buckets[k]`` — schedulable nodes with exactly ``k`` whole free healthy GPUs, in name order. A whole-GPU
  task needing ``g`` walks buckets ``g, g+1, …`` (bin-pack: fewest free GPUs left) or from the top down
  (spread).
* ``partial`` — every partly used healthy GPU as ``(-used, node, gpu)``, sorted: a fraction ``f`` finds the
  most used GPU that still fits with one bisect (bin-pack) or the least used one (spread).
* ``releasing`` — nodes with capacity being released, searched only when a task fits nowhere now
  (pipelining).
* static predicates (labels, taints, affinity, readiness) are evaluated once per (pod signature, node
  class) and cached.

Placement order (close to lexicographic, as KAI): nominated node (a previous pipelined placement) first,
then feasibility, then GPU sharing (most/least used device), then the session's ``NodeOrder`` (the node-order
plugin: bin-pack or spread) on free GPUs; ties by node name. A fraction takes a shared GPU before a free one: with
spread, the least used shared GPU of the chosen node; with bin-pack, a shared GPU being released that is more used
than where it would bind now (releasing portions counted as used) gets it pipelined. CPU-only tasks prefer nodes
without GPUs, then the node order on free CPU. Without a node order the index takes the first fit in its own order
(``FirstFit``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kai_stream.core.scheduler.framework.hooks import NodeOrder
from kai_stream.core.scheduler.framework.info import UNIT, NodeInfo, TaskInfo, memory_portion

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session

__all__ = ["FirstFit", "NodeIndex", "Placement"]


@dataclass(slots=True, init=False)
class Placement:
    node: NodeInfo
    gpus: tuple[int, ...]
    portion: int
    pipelined: bool = False
    waiting_for: tuple[str, ...] = ()

    def __init__(
        self,
        node: NodeInfo,
        gpus: tuple[int, ...],
        portion: int,
        pipelined: bool = False,
        waiting_for: tuple[str, ...] = (),
    ) -> None:
        self.node, self.gpus, self.portion = node, gpus, portion
        self.pipelined, self.waiting_for = pipelined, waiting_for


class FirstFit:
    """The index's own order: buckets upwards, partly used devices (most used first), least left after placing."""

    def gpu_buckets(self, need: int, size: int) -> range:
        return range(need, size)

    def shared_first(self) -> bool:
        return True

    def devices(self, fitting: list[tuple[int, int]], count: int) -> tuple[int, ...]:
        if count == 1:
            return (min(fitting)[1],)
        return tuple(sorted(g for _, g in sorted(fitting)[:count]))

    def leftover(self, left: int, gpu_task: bool) -> int:
        return left


_FIRST_FIT = FirstFit()

_UNKNOWN = object()
"""``NodeIndex._static``'s answer for a (signature, node class) not evaluated yet."""


def _eligible(node: NodeInfo) -> bool:
    return node.ready and not node.unschedulable


def _gpu_free(node: NodeInfo, future: bool) -> list[int]:
    """Per GPU: ``gpu_free_future`` (future) or ``gpu_free_now``, for every device of the node."""
    columns = zip(node.gpu_used, node.gpu_rel, node.gpu_pipe, strict=True)
    if future:
        return [UNIT - used + rel - pipe for used, rel, pipe in columns]
    return [UNIT - used - (pipe - rel if pipe > rel else 0) for used, rel, pipe in columns]


_memory_portion = memory_portion


class NodeIndex:
    def __init__(self, session: Session) -> None:
        self.ssn = session
        self.buckets: list[list[int]] = []
        self.partial: list[tuple[int, int, int]] = []
        self.releasing: set[int] = set()
        self._static: dict[tuple[int, int], str | None] = {}
        self.allowed: AbstractSet[int] | None = None
        """When set, only these node indices may take a task (a topology domain chosen for the current job)."""
        self.allowed_for: dict[str, AbstractSet[int]] = {}
        """Per task uid, the only node indices that task may take (its subgroup's topology domain), in place of
        ``allowed`` for ``find``, ``find_free`` and ``find_among``."""
        self.tiers: list[frozenset[int]] | None = None
        """When set, ``find`` and ``find_free`` search these node sets in turn (free capacity in every one first):
        the preferred-level topology scores of the current job."""
        self.tiers_for: dict[str, list[frozenset[int]]] = {}
        """Per task uid, the tiers of its subgroup's preferred level, in place of ``tiers``."""

    # ------------------------------------------------------------------ maintenance

    def clone(self, session: Session) -> NodeIndex:
        """An index of the same nodes for ``session``: same entries, nothing cached (predicates are per session)."""
        other = NodeIndex(session)
        other.buckets = [bucket[:] for bucket in self.buckets]
        other.partial = self.partial[:]
        other.releasing = set(self.releasing)
        return other

    def build(self) -> None:
        nodes = self.ssn.nodes
        top = max((n.gpu_count for n in nodes), default=0)
        self.buckets = [[] for _ in range(top + 1)]
        partial: list[tuple[int, int, int]] = []
        for node in nodes:
            if _eligible(node):
                self.buckets[node.free_whole].append(node.idx)
                partial.extend(self._partial_entries(node))
            if self._is_releasing(node):
                self.releasing.add(node.idx)
        partial.sort()
        self.partial = partial

    @staticmethod
    def _is_releasing(node: NodeInfo) -> bool:
        return node.cpu_rel > 0 or node.mem_rel > 0 or any(node.gpu_rel)

    @staticmethod
    def _partial_entries(node: NodeInfo) -> list[tuple[int, int, int]]:
        out = []
        columns = zip(node.healthy, node.gpu_used, node.gpu_rel, node.gpu_pipe, strict=True)
        for g, (ok, used, rel, pipe) in enumerate(columns):
            if ok:
                taken = used + pipe - rel if pipe > rel else used
                if 0 < taken < UNIT:
                    out.append((-taken, node.idx, g))
        return out

    def remove(self, node: NodeInfo) -> None:
        """Take ``node`` out of the index before its usage changes."""
        if _eligible(node):
            bucket = self.buckets[node.free_whole]
            del bucket[bisect_left(bucket, node.idx)]
            for entry in self._partial_entries(node):
                del self.partial[bisect_left(self.partial, entry)]
        self.releasing.discard(node.idx)

    def add(self, node: NodeInfo) -> None:
        """Put ``node`` back after its usage changed."""
        node.free_whole = node.count_free_whole()
        if _eligible(node):
            insort(self.buckets[node.free_whole], node.idx)
            for entry in self._partial_entries(node):
                insort(self.partial, entry)
        if self._is_releasing(node):
            self.releasing.add(node.idx)

    @staticmethod
    def release_keeps_entries(node: NodeInfo, gpus: tuple[int, ...]) -> bool:
        """Whether changing only the released amounts on ``gpus`` leaves the node's bucket and partial entries
        as they are (nothing pipelined onto those GPUs): then only ``refresh_releasing`` is needed."""
        pipe = node.gpu_pipe
        return all(pipe[g] == 0 for g in gpus)

    def refresh_releasing(self, node: NodeInfo) -> None:
        if self._is_releasing(node):
            self.releasing.add(node.idx)
        else:
            self.releasing.discard(node.idx)

    # ------------------------------------------------------------------ predicates

    def static(self, task: TaskInfo, node: NodeInfo) -> str | None:
        key = (task.sig, node.class_id)
        try:
            return self._static[key]
        except KeyError:
            result = self.ssn.hooks.predicate(task, node)
            self._static[key] = result
            return result

    # ------------------------------------------------------------------ search

    def _narrowed(self, search: Callable[..., Placement | None], task: TaskInfo, *args: Any) -> Placement | None:
        """``search`` for ``task`` with ``allowed`` set to the task's own nodes (``allowed_for``)."""
        outer, self.allowed = self.allowed, self.allowed_for[task.uid]
        try:
            return search(task, *args)
        finally:
            self.allowed = outer

    def _tiered(self, searches: tuple[Callable[[TaskInfo], Placement | None], ...], task: TaskInfo) -> Placement | None:
        """Each of ``searches`` over the task's tiers in turn (inside the task's own nodes), the first placement
        found; without tiers, the last search inside the task's own nodes."""
        outer = self.allowed
        base = self.allowed_for.get(task.uid, outer)
        tiers = self.tiers_for.get(task.uid, self.tiers)
        try:
            if tiers is None:
                self.allowed = base
                return searches[-1](task)
            for search in searches:
                for tier in tiers:
                    self.allowed = tier if base is None else frozenset(i for i in tier if i in base)
                    found = search(task)
                    if found is not None:
                        return found
            return None
        finally:
            self.allowed = outer

    def find(self, task: TaskInfo) -> Placement | None:
        """Best placement on free capacity, else on releasing capacity (pipelined), else None."""
        if self.tiers is not None or self.allowed_for or self.tiers_for:
            return self._tiered((self._find_now, self._find), task)
        return self._find(task)

    def _find(self, task: TaskInfo) -> Placement | None:
        if task.prev_pipelined is not None:
            nominated = self.ssn.node_by_name.get(task.prev_pipelined[0])
            if nominated is not None:
                found = self._fit_on(task, nominated, future=False) or self._fit_on(task, nominated, future=True)
                if found is not None:
                    return self._keep_nominated_gpus(task, found)
        found = self._find_now(task)
        if self.releasing and task.gpu_frac and task.gpu_devices == 1 and self._order().shared_first():
            shared = self._shared_releasing(task, found)
            if shared is not None:
                return shared
        if found is None and self.releasing:
            found = self._find_pipelined(task)
        return found

    @staticmethod
    def _keep_nominated_gpus(task: TaskInfo, found: Placement) -> Placement:
        """On the nominated node, keep the GPUs of the earlier nomination when they still fit the same way."""
        assert task.prev_pipelined is not None
        wanted = task.prev_pipelined[1]
        node = found.node
        if not wanted or len(wanted) != len(found.gpus) or wanted == found.gpus:
            return found
        free_of = node.gpu_free_future if found.pipelined else node.gpu_free_now
        need = UNIT if found.portion == UNIT else found.portion
        for g in wanted:
            if not (0 <= g < len(node.healthy)) or not node.healthy[g]:
                return found
            free = free_of(g)
            if (need == UNIT and free != UNIT) or free < need:
                return found
        found.gpus = tuple(wanted)
        return found

    def find_among(self, task: TaskInfo, nodes: list[NodeInfo]) -> Placement | None:
        """Best of ``nodes`` in order: free capacity first, then releasing capacity (pipelined); victim searches."""
        if self.allowed_for and task.uid in self.allowed_for:
            return self._narrowed(self._find_among, task, nodes)
        return self._find_among(task, nodes)

    def _find_among(self, task: TaskInfo, nodes: list[NodeInfo]) -> Placement | None:
        for node in nodes:
            found = self._fit_on(task, node, future=False)
            if found is not None:
                return found
        for node in nodes:
            found = self._fit_on(task, node, future=True)
            if found is not None:
                found.waiting_for = tuple(sorted(t.key for t in self.ssn.releasing_tasks.get(node.name, ())))
                return found
        return None

    def find_releasing_on(self, task: TaskInfo, node: NodeInfo) -> Placement | None:
        """The placement of ``task`` on ``node`` counting what is being released there as free (pipelined)."""
        return self._fit_on(task, node, future=True)

    def find_free_on(self, task: TaskInfo, node: NodeInfo) -> Placement | None:
        """The placement of ``task`` on ``node``'s free capacity."""
        return self._fit_on(task, node, future=False)

    def fits_among(self, task: TaskInfo, nodes: list[NodeInfo]) -> bool:
        """Whether ``find_among`` would find a placement (without naming the releasing pods it would wait for)."""
        for future in (False, True):
            for node in nodes:
                if self._fit_on(task, node, future=future) is not None:
                    return True
        return False

    def find_free(self, task: TaskInfo) -> Placement | None:
        """Best placement on free capacity only (no pipelining)."""
        if self.tiers is not None or self.allowed_for or self.tiers_for:
            return self._tiered((self._find_now,), task)
        return self._find_now(task)

    def _find_now(self, task: TaskInfo) -> Placement | None:
        order = self._order()
        if task.gpu_whole:
            node = self._whole(task, order.gpu_buckets(task.gpu_whole, len(self.buckets)))
            return None if node is None else Placement(node, self._free_gpus(node, task.gpu_whole), UNIT)
        if task.gpu_frac and task.gpu_devices == 1:
            return self._fraction(task, task.gpu_frac, order)
        if task.gpu_mem_mib:
            return self._scan(task, future=False)
        return self._scan(task, future=False)

    def _fits_host(self, task: TaskInfo, node: NodeInfo) -> bool:
        allowed = self.allowed
        return (
            (allowed is None or node.idx in allowed)
            and node.cpu_alloc - node.cpu_used - max(0, node.cpu_pipe - node.cpu_rel) >= task.cpu
            and node.mem_alloc - node.mem_used - max(0, node.mem_pipe - node.mem_rel) >= task.mem
            and self.static(task, node) is None
        )

    def _order(self) -> NodeOrder:
        order = self.ssn.hooks.node_order
        return _FIRST_FIT if order is None else order

    def _whole(self, task: TaskInfo, ks: range) -> NodeInfo | None:
        """The first node in buckets ``ks`` (free-whole-GPU counts, in the node order's order) that fits."""
        buckets = self.buckets
        nodes = self.ssn.nodes
        for k in ks:
            for idx in buckets[k]:
                node = nodes[idx]
                if self._fits_host(task, node):
                    return node
        return None

    @staticmethod
    def _free_gpus(node: NodeInfo, need: int) -> tuple[int, ...]:
        free = [g for g in range(len(node.healthy)) if node.healthy[g] and node.gpu_free_now(g) == UNIT]
        return tuple(free[:need])

    def _fraction(self, task: TaskInfo, portion: int, order: NodeOrder) -> Placement | None:
        nodes = self.ssn.nodes
        partial = self.partial
        start = bisect_left(partial, (portion - UNIT, -1, -1))
        idle = order.gpu_buckets(1, len(self.buckets))
        if order.shared_first():
            for i in range(start, len(partial)):
                _, idx, g = partial[i]
                node = nodes[idx]
                if self._fits_host(task, node):
                    return Placement(node, (g,), portion)
            host = self._whole(task, idle)
            return None if host is None else Placement(host, self._free_gpus(host, 1), portion)
        host = self._whole(task, idle)
        if host is not None:
            return Placement(host, self._least_used_shared(host, portion) or self._free_gpus(host, 1), portion)
        end = len(partial)
        while end > start:
            lo = max(start, bisect_left(partial, (partial[end - 1][0], -1, -1)))
            for i in range(lo, end):
                _, idx, g = partial[i]
                node = nodes[idx]
                if self._fits_host(task, node):
                    return Placement(node, (g,), portion)
            end = lo
        return None

    @staticmethod
    def _least_used_shared(node: NodeInfo, portion: int) -> tuple[int, ...]:
        """The least used shared GPU of ``node`` (partly used now) that fits ``portion`` now; () when none: KAI
        puts a fraction on a shared GPU before a free one, spread ordering only the shared ones."""
        best: tuple[int, int] | None = None
        for g, free in enumerate(_gpu_free(node, False)):
            if node.healthy[g] and portion <= free < UNIT and (best is None or free > best[0]):
                best = (free, g)
        return () if best is None else (best[1],)

    def _shared_releasing(self, task: TaskInfo, than: Placement | None) -> Placement | None:
        """A fraction's pipelined placement on a shared GPU being released that is more used (releasing and
        pipelined portions counted) than the GPU ``than`` binds it on (a free GPU counts 0), the most used such
        one; None when there is none: KAI gives a fraction the most used shared GPU it fits when the releasing
        pods are gone, and pipelines it there rather than opening a free GPU (bin-pack only)."""
        portion = task.gpu_frac

        def taken(node: NodeInfo, g: int) -> int:
            return node.gpu_used[g] + node.gpu_pipe[g]

        best = -1 if than is None else taken(than.node, than.gpus[0])
        found: Placement | None = None
        nodes = self.ssn.nodes
        for idx in sorted(self.releasing):
            node = nodes[idx]
            rel = node.gpu_rel
            if not any(rel) or not self._fits_future_host(task, node):
                continue
            for g, free in enumerate(_gpu_free(node, True)):
                if rel[g] and node.healthy[g] and free >= portion and taken(node, g) > best:
                    best = taken(node, g)
                    found = Placement(node, (g,), portion, pipelined=True)
        if found is None:
            return None
        if found.node.gpu_free_now(found.gpus[0]) >= portion and self._fits_host(task, found.node):
            found.pipelined = False
        else:
            found.waiting_for = tuple(sorted(t.key for t in self.ssn.releasing_tasks.get(found.node.name, ())))
        return found

    def _fits_future_host(self, task: TaskInfo, node: NodeInfo) -> bool:
        allowed = self.allowed
        return (
            _eligible(node)
            and (allowed is None or node.idx in allowed)
            and node.cpu_free_future() >= task.cpu
            and node.mem_free_future() >= task.mem
            and self.static(task, node) is None
        )

    def _fit_on(self, task: TaskInfo, node: NodeInfo, *, future: bool) -> Placement | None:
        """The placement of ``task`` on one node, or None; GPUs chosen by the GPU strategy."""
        if not node.ready or node.unschedulable:
            return None
        static = self._static.get((task.sig, node.class_id), _UNKNOWN)
        if static is not None and (static is not _UNKNOWN or self.static(task, node) is not None):
            return None
        if self.allowed is not None and node.idx not in self.allowed:
            return None
        if future:
            if node.cpu_free_future() < task.cpu or node.mem_free_future() < task.mem:
                return None
        elif node.cpu_free_now() < task.cpu or node.mem_free_now() < task.mem:
            return None
        if task.gpu_whole:
            if not future and node.free_whole < task.gpu_whole:
                return None
            free = [g for g, f in enumerate(_gpu_free(node, future)) if f == UNIT and node.healthy[g]]
            if len(free) < task.gpu_whole:
                return None
            return Placement(node, tuple(free[: task.gpu_whole]), UNIT, pipelined=future)
        portion = task.gpu_frac or memory_portion(task, node)
        if portion == 0:
            return Placement(node, (), 0, pipelined=future)
        fitting = [(f, g) for g, f in enumerate(_gpu_free(node, future)) if f >= portion and node.healthy[g]]
        devices = task.gpu_devices
        if len(fitting) < devices:
            return None
        return Placement(node, self._order().devices(fitting, devices), portion, pipelined=future)

    def _scan(self, task: TaskInfo, *, future: bool) -> Placement | None:
        """Full scan (CPU-only and gpu-memory tasks): score every feasible node."""
        gpu_task = bool(task.gpu_mem_mib or task.gpu_frac)
        order = self._order()
        best: tuple[tuple[int, int, int], Placement] | None = None
        for node in self.ssn.nodes:
            found = self._fit_on(task, node, future=future)
            if found is None:
                continue
            if gpu_task:
                left = sum(node.gpu_free_now(g) for g in range(len(node.healthy)) if node.healthy[g])
            else:
                left = (node.cpu_free_future() if future else node.cpu_free_now()) - task.cpu
            score = (0 if gpu_task or not node.healthy else 1, order.leftover(left, gpu_task), node.idx)
            if best is None or score < best[0]:
                best = (score, found)
        return None if best is None else best[1]

    def _find_pipelined(self, task: TaskInfo) -> Placement | None:
        nodes = self.ssn.nodes
        for idx in sorted(self.releasing):
            node = nodes[idx]
            found = self._fit_on(task, node, future=True)
            if found is not None:
                waiting = sorted(t.key for t in self.ssn.releasing_tasks.get(node.name, ()))
                found.waiting_for = tuple(waiting)
                return found
        return None

    # ------------------------------------------------------------------ diagnosis

    def diagnose(self, task: TaskInfo) -> dict[str, int]:
        """Per failed predicate, on how many nodes of the pool it was the first to fail."""
        counts: dict[str, int] = {}
        for node in self.ssn.nodes:
            reason = self._first_failure(task, node)
            if reason is not None:
                counts[reason] = counts.get(reason, 0) + 1
        return counts

    def _first_failure(self, task: TaskInfo, node: NodeInfo) -> str | None:
        if not node.ready:
            return "NodeNotReady"
        if node.unschedulable:
            return "NodeUnschedulable"
        failed = self.static(task, node)
        if failed is not None:
            return failed
        if task.gpu_whole or task.gpu_frac or task.gpu_mem_mib:
            if task.gpu_mem_mib and node.gpu_memory_mib <= 0 and node.healthy:
                return "InsufficientGPUMemory"
            need = task.gpu_whole or task.gpu_devices
            if task.gpu_whole:
                if node.free_whole < need:
                    if False not in node.healthy:
                        return "InsufficientGPU"
                    fits_any = sum(1 for u, p in zip(node.gpu_used, node.gpu_pipe, strict=True) if not u and not p)
                    return "UnhealthyGPU" if fits_any >= need else "InsufficientGPU"
            else:
                portion = task.gpu_frac or memory_portion(task, node)
                free = [f >= portion for f in _gpu_free(node, False)]
                fits_healthy = sum(1 for ok, f in zip(node.healthy, free, strict=True) if ok and f)
                if fits_healthy < need:
                    return "UnhealthyGPU" if sum(free) >= need else "InsufficientGPU"
        if node.cpu_free_now() < task.cpu:
            return "InsufficientCPU"
        if node.mem_free_now() < task.mem:
            return "InsufficientMemory"
        return None
