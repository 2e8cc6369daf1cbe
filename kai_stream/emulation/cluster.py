"""The cluster-events log as the live pipeline keeps it, emulated in process (``simulate``, its replay).

* ``ClusterLog``: offsets per partition of the cluster-events topic, as the broker numbers them (a pool's
  events go to ``partition_for(pool)``, cluster-wide ones, pool ``*``, to every partition).
* ``round_barrier``: the Tick that opens a round, one record in every partition.
* ``EmulatedCluster``: the log, the state it folds to and the binder's marks; observations that change
  nothing about their object are not published (the connector's rule); a decision is folded without an
  offset (it lives in the decisions topic) and returns what it will cause (``react``); evicted pods still
  terminating are removed when the clock jumps by the termination grace (``end_grace``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kai_stream.core.events import (
    ALL_POOLS,
    ClusterEvent,
    Decision,
    EvictionRequested,
    NodeRemoved,
    ObjectKey,
    ObservedBase,
    ObservedEvent,
    PodGroupRemoved,
    PodRemoved,
    PodSpec,
    QueueRemoved,
    Tick,
    content_digest,
    event_key,
    stable_id,
)
from kai_stream.core.state import ClusterState, apply
from kai_stream.emulation.react import Marks, Policy, react, removal
from kai_stream.topicspecs import cluster_events_partitions, partition_for

__all__ = ["DEFAULT_TERMINATION_GRACE_S", "ClusterLog", "EmulatedCluster", "round_barrier"]

DEFAULT_TERMINATION_GRACE_S = 30.0
"""Kubernetes' default ``terminationGracePeriodSeconds``."""


@dataclass
class ClusterLog:
    """Offsets of the cluster-events log, per partition, as the live broker would number them."""

    partitions: int
    last: dict[int, int] = field(default_factory=dict)

    def append(self, event: ClusterEvent) -> None:
        targets = range(self.partitions) if event.pool == ALL_POOLS else [partition_for(event.pool, self.partitions)]
        for partition in targets:
            self.last[partition] = self.last.get(partition, -1) + 1

    def offset_of(self, pool: str) -> int:
        """The offset of the last event in ``pool``'s partition (-1 when it is empty)."""
        return self.last.get(partition_for(pool, self.partitions), -1)


def round_barrier(round_number: int, ts: float) -> Tick:
    """The Tick that opens round ``round_number`` (from 1) of a simulation, live or in-process."""
    return Tick(event_id=stable_id("round-barrier", str(round_number)), ts=ts, pool=ALL_POOLS)


@dataclass
class EmulatedCluster:
    """The cluster-events log as ``simulate`` models it (module doc)."""

    log: ClusterLog
    state: ClusterState = field(default_factory=ClusterState)
    marks: Marks = field(default_factory=Marks)
    termination_grace: float = 0.0
    terminating: dict[str, tuple[PodSpec, EvictionRequested]] = field(default_factory=dict)
    """Evicted pods still terminating (by uid): removed by ``end_grace``."""
    contents: dict[ObjectKey, str] = field(default_factory=dict)
    """The content of the last observation per object: the connector publishes only a change of it."""

    policy: Policy = field(init=False)

    def __post_init__(self) -> None:
        self.policy = Policy(termination_grace=self.termination_grace)

    @classmethod
    def of(
        cls,
        events: Iterable[ObservedEvent],
        *,
        partitions: int | None = None,
        termination_grace: float = DEFAULT_TERMINATION_GRACE_S,
    ) -> EmulatedCluster:
        """A cluster whose log starts with ``events`` (``partitions``: by default the cluster-events topic's)."""
        log = ClusterLog(partitions if partitions is not None else cluster_events_partitions())
        cluster = cls(log, termination_grace=termination_grace)
        for event in events:
            cluster.observe(event)
        return cluster

    def observe(self, event: ClusterEvent) -> None:
        """Append ``event`` to cluster-events and fold it, unless it observes an object unchanged."""
        key = event_key(event)
        if key is not None and isinstance(event, ObservedBase):
            if not isinstance(event, NodeRemoved | PodRemoved | QueueRemoved | PodGroupRemoved):
                content = content_digest(event)
                if self.contents.get(key) == content:
                    return
                self.contents[key] = content
            else:
                self.contents.pop(key, None)
        self.log.append(event)
        apply(self.state, event, self.state.offset + 1)

    def start_round(self, round_number: int) -> None:
        """Append the barrier that opens round ``round_number`` (``round_barrier``)."""
        self.observe(round_barrier(round_number, self.state.now))

    def decide(self, decision: Decision) -> list[ClusterEvent]:
        """Fold ``decision`` (no offset: it is not in cluster-events) and return the events it will cause."""
        caused = self.react(decision)
        apply(self.state, decision)
        return caused

    def react(self, decision: Decision) -> list[ClusterEvent]:
        """The events ``decision`` (folded or not) will cause; an evicted pod that is not removed at once is
        kept terminating."""
        caused = react(decision, self.state, self.policy, self.marks)
        pod = self.state.pods.get(decision.uid)
        if isinstance(decision, EvictionRequested) and pod is not None and not any(
            isinstance(e, PodRemoved) for e in caused
        ):
            self.terminating[pod.uid] = (pod, decision)
        return caused

    def end_grace(self) -> bool:
        """Advance the clock by the grace period: every terminating evicted pod is removed (pods sorted by
        uid), its replacement observed. False when none was terminating."""
        if not self.terminating:
            return False
        ts = self.state.now + self.termination_grace
        for uid in sorted(self.terminating):
            pod, decision = self.terminating[uid]
            for event in removal(decision, pod, ts, self.policy):
                self.observe(event)
        self.terminating.clear()
        return True
