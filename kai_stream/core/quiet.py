"""What the core's rules say about a pool between cycles, for a clock that skips cycles that cannot decide.

* ``idle``: a cycle on the pool now provably decides nothing, with no session opened: no job has a pending task
  (allocate, consolidation, reclaim and preempt only act for one, and only a pending task gets a reason) and no
  gang is stale (the one action that acts for running jobs alone). ``run_cycle`` takes the same shortcut.
* ``next_deadline``: the earliest event time after ``state.now`` at which time alone may make a cycle on the pool
  decide differently (``inf``: never; just after ``now``: the rules read time continuously). With no event but
  time folded since a cycle that decided nothing, the next cycle decides nothing before it. The time rules, read
  from the pool's snapshot as the cycle sees it: a gang running below its minMember turns stale at its last
  change + ``stale_gang_grace_s``; a waiting job's next aging step or its hold (``plugins.aging.next_change``); a
  running job's start + every positive preempt/reclaim min-runtime a queue or the pool default sets
  (inheritance and reclaim's resolution below the common ancestor only pick among them); a held pod's bind
  back-off end; and, with ``usage_params``, the usage window, which moves with time.
* ``queue_shares``: what a cycle's session says of each queue (fair share, deserved, allocation), as
  ``FairShareRecorded`` carries it; ``shares_when_idle`` says the same without a session when nothing is
  pending: every queue's requestable is its allocation, so its fair share is exactly that (each gets
  min(deserved, allocated), and the remainder covers every unmet request).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import QueueShare, QueueSpec, ResourceAmounts
from kai_stream.core.scheduler.actions.stalegangeviction import below_minimum, stale
from kai_stream.core.scheduler.framework.backoff import backoff_until
from kai_stream.core.scheduler.framework.info import CPU, GPU, MEM
from kai_stream.core.scheduler.framework.reuse import Snapshot, kept_snapshot, repark
from kai_stream.core.scheduler.framework.session import Session
from kai_stream.core.scheduler.plugins.aging import next_change
from kai_stream.core.scheduler.plugins.minruntime import job_started
from kai_stream.core.state import ClusterState

__all__ = [
    "amounts",
    "decides_nothing",
    "idle",
    "min_runtimes",
    "next_deadline",
    "queue_shares",
    "shares_when_idle",
]


def decides_nothing(snapshot: Snapshot, state: ClusterState, config: SchedulerConfig) -> bool:
    """``idle`` on a kept ``snapshot`` (up to date with ``state``)."""
    if snapshot.pending:
        return False
    now, grace = state.now, config.stale_gang_grace_s
    return not any(stale(job, now, grace) for job in snapshot.base.jobs)


def idle(state: ClusterState, config: SchedulerConfig, *, pool: str) -> bool:
    """Whether a cycle on ``pool`` now provably decides nothing (module doc)."""
    snapshot = kept_snapshot(state, config, pool=pool)
    try:
        return decides_nothing(snapshot, state, config)
    finally:
        repark(state, snapshot)


def min_runtimes(config: SchedulerConfig, queues: Iterable[QueueSpec]) -> list[float]:
    """Every positive min-runtime the pool default or a queue sets, sorted."""
    found = {config.preempt_min_runtime_s, config.reclaim_min_runtime_s}
    for q in queues:
        found.update((q.min_runtime_s or 0, q.preempt_min_runtime_s or 0, q.reclaim_min_runtime_s or 0))
    return sorted(limit for limit in found if limit > 0)


def next_deadline(state: ClusterState, config: SchedulerConfig, *, pool: str) -> float:
    """The earliest event time after ``state.now`` at which time alone may change a cycle on ``pool`` (module
    doc); ``inf`` when none will."""
    now = state.now
    if config.usage_params is not None:
        return math.nextafter(now, math.inf)
    found = [backoff_until(failed, config) for failed in state.bind_failures.values()]
    snapshot = kept_snapshot(state, config, pool=pool)
    try:
        jobs = snapshot.base.jobs
        grace = config.stale_gang_grace_s
        found.extend(job.changed + grace for job in jobs if below_minimum(job))
        aging = config.job_aging
        if aging is not None:
            found.extend(next_change(aging, job, now) for job in jobs)
        limits = min_runtimes(config, state.queues.values())
        if limits:
            for job in jobs:
                started = job_started(job)
                if started is not None:
                    found.extend(started + limit for limit in limits)
    finally:
        repark(state, snapshot)
    return min((t for t in found if t > now), default=math.inf)


@functools.lru_cache(maxsize=4096)
def _amounts(gpu: int, cpu: int, memory: int) -> ResourceAmounts:
    return ResourceAmounts(gpu_milli=gpu, cpu_milli=cpu, memory=memory)


def amounts(vector: list[int]) -> ResourceAmounts:
    """A session's (GPU milli, CPU milli, memory) vector as recorded (immutable, so shared between equal ones)."""
    return _amounts(vector[GPU], vector[CPU], vector[MEM])


@functools.lru_cache(maxsize=4096)
def _share(queue: str, fair: ResourceAmounts, deserved: ResourceAmounts, allocated: ResourceAmounts) -> QueueShare:
    return QueueShare(queue=queue, fair_share=fair, deserved=deserved, allocated=allocated)


def queue_shares(session: Session) -> tuple[QueueShare, ...]:
    """Every queue's fair share, deserved quota and allocation in a cycle's session (names sorted)."""
    return tuple(
        _share(name, amounts(q.fair_share), amounts(q.quota), amounts(q.allocated))
        for name, q in sorted(session.queues.items())
    )


def shares_when_idle(state: ClusterState, config: SchedulerConfig, *, pool: str) -> tuple[QueueShare, ...]:
    """``queue_shares`` of an ``idle`` pool without opening a session (module doc): every queue's allocation in the
    pool's kept snapshot as its fair share."""
    snapshot = kept_snapshot(state, config, pool=pool)
    try:
        return tuple(
            _share(name, amounts(q.allocated), amounts(q.quota), amounts(q.allocated))
            for name, q in sorted(snapshot.base.queues.items())
        )
    finally:
        repark(state, snapshot)
