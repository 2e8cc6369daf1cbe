"""What the core's rules say about a pool between cycles, for a clock that skips cycles that cannot decide.

* ``thresholds_crossed``: whether a time threshold a cycle reads lies in (``since``, ``now``]. With no event
  but time folded since a cycle that decided nothing, only these make the next cycle differ: a partial gang's
  stale-gang deadline (its last change + ``stale_gang_grace_s``), a waiting job's next aging step or hold
  (``plugins.aging``), a running pod's min-runtime expiry (its start + every preempt/reclaim min-runtime a queue
  or the pool default sets; inheritance and reclaim's resolution below the common ancestor only pick among them).
* ``shares_when_idle``: the fair shares when nothing is pending: every queue's requestable is its allocation,
  so its fair share is exactly that (each gets min(deserved, allocated), and the remainder covers every unmet
  request); a pod counts for its queue and every ancestor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import PodSpec, QueueSpec
from kai_stream.core.scheduler.plugins.aging import steps_crossed
from kai_stream.core.state import ClusterState

__all__ = ["min_runtimes", "shares_when_idle", "thresholds_crossed"]


def min_runtimes(config: SchedulerConfig, queues: Iterable[QueueSpec]) -> list[float]:
    """Every positive min-runtime the pool default or a queue sets, sorted."""
    found = {config.preempt_min_runtime_s, config.reclaim_min_runtime_s}
    for q in queues:
        found.update((q.min_runtime_s or 0, q.preempt_min_runtime_s or 0, q.reclaim_min_runtime_s or 0))
    return sorted(limit for limit in found if limit > 0)


def thresholds_crossed(
    state: ClusterState,
    config: SchedulerConfig,
    since: float,
    now: float,
    *,
    partial_groups: Iterable[str],
    waiting_created: Iterable[float],
    running: Iterable[str],
) -> bool:
    """Whether a threshold (module doc) lies in (``since``, ``now``]: ``partial_groups`` are the keys
    (``namespace/name``) of gangs running below their minMember, ``waiting_created`` the creation times of the
    jobs of pods not running, ``running`` the uids of running pods (one not started yet counts as crossing)."""
    grace = config.stale_gang_grace_s
    for key in partial_groups:
        changed = state.group_changed.get(key, 0.0)
        if since < changed + grace <= now:
            return True
    aging = config.job_aging
    if aging is not None and any(steps_crossed(aging, created, since, now) for created in waiting_created):
        return True
    limits = min_runtimes(config, state.queues.values())
    if not limits:
        return False
    for uid in running:
        spec = state.pods.get(uid)
        started = spec.started if spec is not None else None
        if started is None:
            return True
        if any(since < started + limit <= now for limit in limits):
            return True
    return False


def shares_when_idle(queues: Mapping[str, QueueSpec], running: Iterable[PodSpec]) -> dict[str, list[int]]:
    """Per queue (all of ``queues``), the GPU milli, CPU milli and memory of the ``running`` pods in it or below."""
    used: dict[str, list[int]] = {name: [0, 0, 0] for name in queues}
    for pod in running:
        name: str | None = pod.queue
        requests = pod.requests
        while name is not None and name in used:
            used[name][0] += requests.gpu_milli
            used[name][1] += requests.cpu_milli
            used[name][2] += requests.memory
            name = queues[name].parent
    return used
