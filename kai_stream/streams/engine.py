"""The processor's logic for one cluster-events partition, without I/O: fold, cycle, chain, rebuild.

Contract with replay (kai_stream/history, kai_stream/replay/):

* each pool has its own state, folding the partition's events whose pool is that pool or ``*`` (a pool
  first seen mid-log starts from the ``*`` events before it), in offset order;
* after a batch, every pool the batch touched runs ``run_cycle`` with ``input_offset`` = the offset of the
  last event that pool folded; the decisions are chained (``events.chain``) after the pool's head hash and
  folded into its state in emitted order;
* a ``ConfigRecorded`` precedes a pool's first decision under a config hash;
* a ``FairShareRecorded`` (each queue's fair share, deserved and allocation in the cycle's session) closes a
  cycle's records whenever the shares differ from the ones the pool last published, measured in the first cycle
  after anything but a Tick was folded or decided (not a decision: no chain, nothing replay compares; a rebuild
  takes the last published ones back).

Restart and rebalance: ``rebuild`` folds the partition from offset 0 together with the decisions already
in the decisions topic (each recorded decision is folded right after the event at its ``input_offset``), so
state, head hash and "config recorded" match what was published; events at or below the rebuilt offset
are then ignored as re-deliveries, and no decision is published twice.

A decision is a function of exactly the events up to its ``input_offset`` (its ``ts`` is the state's time
there): a recorded decision is never folded before its input event. When a rebuild's read of cluster-events
ends short of an input offset an earlier instance had reached, those decisions wait in ``awaiting`` and are
folded when ``fold`` reaches their event; the pool decides nothing until then (its next cycle would otherwise
decide on a state that lacks events the recorded decisions saw, or that holds decisions before their inputs).
"""

from __future__ import annotations

import copy
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

from kai_stream.core.config import SchedulerConfig, config_hash
from kai_stream.core.decide import fold_linked
from kai_stream.core.events import (
    ALL_POOLS,
    BindRequested,
    ClusterEvent,
    ConfigRecorded,
    Decision,
    DecisionsRecord,
    EvictionRequested,
    FairShareRecorded,
    Model,
    PodPending,
    PodPipelined,
    QueueShare,
    Tick,
    decision_hash,
    dumps,
)
from kai_stream.core.quiet import queue_shares
from kai_stream.core.scheduler.cycle import fair_shares, run_cycle
from kai_stream.core.scheduler.framework.session import Session
from kai_stream.core.state import ClusterState, apply


def is_decision(record: Model) -> TypeGuard[Decision]:
    return isinstance(record, BindRequested | EvictionRequested | PodPipelined | PodPending)


@dataclass
class PoolState:
    """One pool's fold plus where its decision chain stands."""

    state: ClusterState
    head: str = ""
    last_input_offset: int = -1
    shares: tuple[QueueShare, ...] = ()
    """The queue shares last published (``FairShareRecorded``) for this pool."""
    shares_stale: bool = True
    """Whether something but a Tick was folded (or decided) since the shares were last measured: the next cycle
    measures them (a cycle that measures opens its session even where it could tell it would decide nothing)."""


@dataclass(frozen=True)
class Outgoing:
    """A record for the decisions topic, keyed by pool; ``encoded``: its canonical bytes (``dumps``) when the cycle
    already made them (a decision's, for its hash), so they are not made again to publish it."""

    pool: str
    record: Model
    encoded: bytes | None = None

    def value(self) -> bytes:
        """The record's bytes on the wire."""
        return self.encoded if self.encoded is not None else dumps(self.record)


@dataclass
class PartitionEngine:
    """Everything one processor knows about one partition of cluster-events."""

    partition: int
    config: SchedulerConfig
    config_hash: str
    config_json: str
    code_version: str
    offset: int = -1
    template: ClusterState = field(default_factory=ClusterState)
    pools: dict[str, PoolState] = field(default_factory=dict)
    config_recorded: set[str] = field(default_factory=set)
    awaiting: dict[str, deque[Decision]] = field(default_factory=dict)
    """Per pool: recorded decisions whose input event this engine has not folded yet (a rebuild that read the
    log to a shorter end than an earlier instance had consumed); each is folded right after that event."""

    @classmethod
    def for_config(cls, partition: int, config: SchedulerConfig, code_version: str) -> PartitionEngine:
        """An empty engine deciding with ``config`` (its hash and JSON recorded with the first decisions)."""
        return cls(
            partition=partition,
            config=config,
            config_hash=config_hash(config),
            config_json=config.model_dump_json(),
            code_version=code_version,
        )

    def _pool(self, name: str) -> PoolState:
        pool = self.pools.get(name)
        if pool is None:
            pool = PoolState(state=copy.deepcopy(self.template))
            self.pools[name] = pool
        return pool

    def expect(self, records: int) -> None:
        """Before folding up to ``records`` events of this partition: each pool whose parked snapshot they would
        outgrow drops its indexes, to be made again in one pass by its next cycle (``Derived.release_if_outgrown``)."""
        for name in sorted(self.pools):
            self.pools[name].state.derived.release_if_outgrown(records)

    def fold(self, offset: int, event: ClusterEvent) -> list[str]:
        """Fold one event; return the pools it touched ([] for a re-delivery)."""
        if offset <= self.offset:
            return []
        self.offset = offset
        if event.pool == ALL_POOLS:
            apply(self.template, event, offset)
            for pool in self.pools.values():
                apply(pool.state, event, offset)
            touched = sorted(self.pools)
        else:
            apply(self._pool(event.pool).state, event, offset)
            touched = [event.pool]
        if not isinstance(event, Tick):
            for name in touched:
                self.pools[name].shares_stale = True
        if self.awaiting:
            for name in touched:
                queue = self.awaiting.get(name)
                while queue and queue[0].input_offset <= offset:
                    apply(self.pools[name].state, queue.popleft())
                if queue is not None and not queue:
                    del self.awaiting[name]
        return touched

    def cycle(
        self, pools: Iterable[str], inspect: Mapping[str, Callable[[Session], None]] | None = None
    ) -> list[Outgoing]:
        """Run a cycle for each pool (sorted), fold its decisions, return what to publish. ``inspect[pool]``, when
        given, is called with that pool's closed session (``run_cycle``'s ``inspect``: the same decisions)."""
        out: list[Outgoing] = []
        for name in sorted(set(pools)):
            pool = self.pools.get(name)
            if pool is None or pool.state.offset <= pool.last_input_offset or name in self.awaiting:
                continue
            measured: list[tuple[QueueShare, ...]] = []
            given = (inspect or {}).get(name)

            def measure(
                session: Session,
                given: Callable[[Session], None] | None = given,
                measured: list[tuple[QueueShare, ...]] = measured,
            ) -> None:
                measured.append(queue_shares(session))
                if given is not None:
                    given(session)

            decisions = run_cycle(
                pool.state,
                self.config,
                pool=name,
                input_offset=pool.state.offset,
                code_version=self.code_version,
                inspect=measure if pool.shares_stale else given,
            )
            pool.shares_stale = bool(decisions) or (pool.shares_stale and not measured)
            shares: list[Outgoing] = []
            if measured and measured[0] != pool.shares:
                pool.shares = measured[0]
                recorded_shares = FairShareRecorded(
                    ts=pool.state.now,
                    pool=name,
                    input_offset=pool.state.offset,
                    config_hash=self.config_hash,
                    queues=pool.shares,
                )
                shares.append(Outgoing(name, recorded_shares))
            if not decisions:
                out.extend(shares)
                continue
            if name not in self.config_recorded:
                recorded = ConfigRecorded(
                    ts=pool.state.now,
                    pool=name,
                    config_hash=self.config_hash,
                    code_version=self.code_version,
                    config=self.config_json,
                )
                out.append(Outgoing(name, recorded))
                self.config_recorded.add(name)
            linked, pool.head = fold_linked(pool.state, decisions, pool.head)
            pool.last_input_offset = pool.state.offset
            out.extend(Outgoing(name, decision, raw) for decision, raw in linked)
            out.extend(shares)
        return out

    def fair_shares(self, pool: str) -> dict[str, dict[str, float]]:
        state = self.pools[pool].state
        return fair_shares(state, self.config, pool)

    # ------------------------------------------------------------------ rebuild

    def _fold_recorded(self, pool_name: str, decision: Decision) -> None:
        pool = self._pool(pool_name)
        apply(pool.state, decision)
        pool.head = decision_hash(decision)
        pool.last_input_offset = decision.input_offset

    def rebuild(self, events: Iterable[tuple[int, ClusterEvent]], recorded: Sequence[DecisionsRecord]) -> None:
        """Fold ``events`` (offset order) interleaved with the ``recorded`` decisions of this partition."""
        pending: dict[str, deque[Decision]] = defaultdict(deque)
        for record in recorded:
            if isinstance(record, ConfigRecorded):
                if record.config_hash == self.config_hash:
                    self.config_recorded.add(record.pool)
            elif isinstance(record, FairShareRecorded):
                self._pool(record.pool).shares = record.queues
            elif is_decision(record):
                pending[record.pool].append(record)
        for offset, event in events:
            for name in self.fold(offset, event):
                queue = pending.get(name)
                while queue and queue[0].input_offset <= offset:
                    self._fold_recorded(name, queue.popleft())
        for name in sorted(pending):
            if pending[name]:
                pool = self._pool(name)
                pool.head = decision_hash(pending[name][-1])
                pool.last_input_offset = pending[name][-1].input_offset
                self.awaiting[name] = pending[name]
