"""Queue resource usage over time, kept by the fold from event times alone (time-based fair share's input).

KAI reads this from Prometheus (the queue controller's ``kai_queue_allocated_*`` metrics and the nodes'
capacity); kai-stream derives it from the log, so a replay sees exactly what the original run saw.

``UsageLedger`` holds, per queue, the resources its bound pods hold now, and the integral of that over time in
buckets of ``BUCKET_S`` seconds of event time (resource-seconds: GPU milli-device-seconds, millicore-seconds,
byte-seconds), plus the same integral of the cluster's capacity (every node's allocatable). Rules:

1. Time is ``ClusterState.now`` (the largest event time folded), so it never runs backwards.
2. A pod holds resources while it is on a node and not Succeeded/Failed; it counts for its own queue label, else
   its pod group's queue, else ``""`` (the configured default queue, which the fold does not know).
3. Integrals are written lazily: a queue's (or the capacity's) open segment, from its last change to now, is
   written into the buckets when what it holds changes; ``integrals`` adds the open segments to a read without
   writing them. Buckets older than ``RETAIN_S`` before the newest write are dropped (windows are at most that);
   a queue's buckets are only ever added at or after its newest, so their insertion order is their time order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kai_stream.core.events import NodeSpec, PodSpec

__all__ = ["BUCKET_S", "RETAIN_S", "Integrals", "UsageLedger", "pod_holding"]

BUCKET_S = 60.0
"""Bucket width in seconds of event time (KAI's default usage query resolution, one minute)."""
RETAIN_S = 14 * 86_400.0
"""How far back the ledger keeps buckets; a usage window may not be longer."""
_RETAIN_BUCKETS = int(RETAIN_S // BUCKET_S)

Vector = tuple[int, int, int]
Buckets = dict[int, list[float]]
Integrals = dict[int, tuple[float, float, float]]
"""Bucket index -> resource-seconds (GPU milli-devices, millicores, bytes) inside that bucket."""
_ZERO: Vector = (0, 0, 0)


def pod_holding(pod: PodSpec, node: NodeSpec | None) -> Vector:
    """What a bound pod holds: its requests, a GPU fraction as milli-devices, GPU memory against the node's."""
    gpu = pod.requests.gpu_milli
    if not gpu and pod.gpu_fraction_milli:
        gpu = pod.gpu_fraction_milli * pod.gpu_fraction_devices
    elif not gpu and pod.gpu_memory_mib and node is not None and node.gpu_memory_mib > 0:
        gpu = -(-pod.gpu_memory_mib * 1000 // node.gpu_memory_mib) * pod.gpu_fraction_devices
    return (gpu, pod.requests.cpu_milli, pod.requests.memory)


def _write(buckets: Buckets, held: Vector, start: float, end: float) -> None:
    """Add ``held`` x the time in [start, end) to the buckets it spans, then drop the expired ones."""
    if end <= start or held == _ZERO:
        return
    last = int(end // BUCKET_S)
    first = max(int(start // BUCKET_S), last - _RETAIN_BUCKETS)
    for b in range(first, last + 1):
        dt = min(end, (b + 1) * BUCKET_S) - max(start, b * BUCKET_S)
        if dt <= 0:
            continue
        cell = buckets.get(b)
        if cell is None:
            cell = buckets[b] = [0.0, 0.0, 0.0]
        cell[0] += held[0] * dt
        cell[1] += held[1] * dt
        cell[2] += held[2] * dt
    oldest = last - _RETAIN_BUCKETS
    while buckets and next(iter(buckets)) < oldest:
        del buckets[next(iter(buckets))]


def _add(a: Vector, b: Vector, sign: int) -> Vector:
    return (a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2])


@dataclass
class UsageLedger:
    """Per-queue held resources and their bucketed integrals over event time (see the module rules)."""

    holding: dict[str, tuple[str, Vector]] = field(default_factory=dict)
    """Per pod uid that holds resources: (its queue, what it holds)."""
    held: dict[str, Vector] = field(default_factory=dict)
    since: dict[str, float] = field(default_factory=dict)
    """Per queue: the time its open segment starts."""
    buckets: dict[str, Buckets] = field(default_factory=dict)
    capacity: Vector = _ZERO
    capacity_since: float = 0.0
    capacity_buckets: Buckets = field(default_factory=dict)
    node_capacity: dict[str, Vector] = field(default_factory=dict)

    def pod_changed(self, uid: str, queue: str, pod: PodSpec | None, node: NodeSpec | None, now: float) -> None:
        """Pod ``uid`` is now ``pod`` (None: gone); ``queue`` is the queue it counts for (rule 2)."""
        holds = (
            pod is not None
            and pod.managed
            and pod.node_name is not None
            and pod.phase != "Succeeded"
            and pod.phase != "Failed"
        )
        new = (queue, pod_holding(pod, node)) if holds and pod is not None else None
        old = self.holding.get(uid)
        if old == new:
            return
        if old is not None:
            del self.holding[uid]
            self._change(old[0], old[1], -1, now)
        if new is not None:
            self.holding[uid] = new
            self._change(new[0], new[1], 1, now)

    def _change(self, queue: str, amount: Vector, sign: int, now: float) -> None:
        held = self.held.get(queue, _ZERO)
        start = self.since.get(queue, now)
        _write(self.buckets.setdefault(queue, {}), held, start, now)
        after = _add(held, amount, sign)
        if after == _ZERO:
            self.held.pop(queue, None)
        else:
            self.held[queue] = after
        self.since[queue] = now

    def node_changed(self, name: str, node: NodeSpec | None, now: float) -> None:
        """Node ``name`` is now ``node`` (None: removed); the capacity is the sum of nodes' allocatable."""
        a = node.allocatable if node is not None else None
        new = (a.gpu_milli, a.cpu_milli, a.memory) if a is not None else None
        old = self.node_capacity.get(name)
        if old == new:
            return
        _write(self.capacity_buckets, self.capacity, self.capacity_since, now)
        capacity = self.capacity
        if old is not None:
            capacity = _add(capacity, old, -1)
            del self.node_capacity[name]
        if new is not None:
            capacity = _add(capacity, new, 1)
            self.node_capacity[name] = new
        self.capacity, self.capacity_since = capacity, now

    def queues(self) -> list[str]:
        """Every queue with recorded or held usage, sorted."""
        return sorted(set(self.buckets) | set(self.held))

    def integrals(self, queue: str | None, now: float, start: float) -> Integrals:
        """Resource-seconds per bucket, for every bucket from the one holding ``start`` to the one holding ``now``,
        of ``queue`` (None: the capacity), open segment included (the same sums a write would store), nothing
        written."""
        if queue is None:
            stored, held, since = self.capacity_buckets, self.capacity, self.capacity_since
        else:
            stored, held, since = self.buckets.get(queue, {}), self.held.get(queue, _ZERO), self.since.get(queue, now)
        first, last = int(start // BUCKET_S), int(now // BUCKET_S)
        out: Integrals = {}
        span = range(first, last + 1) if last - first < len(stored) else sorted(b for b in stored if b >= first)
        for b in span:
            cell = stored.get(b)
            if cell is not None:
                out[b] = (cell[0], cell[1], cell[2])
        if held != _ZERO and now > since:
            for b in range(max(first, int(since // BUCKET_S)), int(now // BUCKET_S) + 1):
                dt = min(now, (b + 1) * BUCKET_S) - max(since, b * BUCKET_S)
                if dt <= 0:
                    continue
                g, c, m = out.get(b, (0.0, 0.0, 0.0))
                out[b] = (g + held[0] * dt, c + held[1] * dt, m + held[2] * dt)
        return out
