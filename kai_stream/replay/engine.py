"""An in-process scheduler loop with an emulated binder and kubelet, producing a log shaped like the live one.

Given observed events (what the connectors would publish) and a config, it plays them in event-time order:
fold a batch (the events of one event time, or the batches a caller gives: the what-if's are a recorded run's
cycles), run cycles until nothing new happens, and emulate the cluster's answer to each decision as the live
binder, kubelets and watch would:

* ``BindRequested`` -> a ``PodBound`` outcome, then the pod observed ``Running`` on its node; a pod with
  ``duration_s`` is observed ``Succeeded`` that much later and then deleted (as a Job's TTL controller does);
* ``EvictionRequested`` -> a ``PodEvicted`` outcome, then the pod removed (no termination grace here).

The answers are ``kai_stream.emulation.react``'s under ``POLICY`` (completions queued by
``kai_stream.emulation.Finishing``, as the trace simulator's are); this module is the clock. A batch that only
advances time after a cycle that decided nothing cycles only once the core's next deadline
(``core.quiet.next_deadline``) is reached: before it, that cycle would decide nothing either. Given the
``Emulation`` a simulated run recorded (a trace run: evicted pods restarted), it answers and cycles as that run
did instead: completions due at a batch's time fold with it (one cycle), a completion alone cycles only when the
run cycled per event time, and a cycle is repeated only as that run repeated it.

Outcomes go back into the event log at new offsets, exactly as they return through the cluster-events topic.
Decisions are chained (``prev_hash``) and the config is recorded first, so the result replays like a
recorded log. The what-if runs use it on the observed part of a recorded history.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import orjson

import kai_stream
from kai_stream.core.config import SchedulerConfig, config_hash
from kai_stream.core.decide import decide
from kai_stream.core.events import (
    ClusterEvent,
    ConfigRecorded,
    EvictionRequested,
    GpuHealthObserved,
    ObservedEvent,
    PodPipelined,
    Tick,
)
from kai_stream.core.quiet import next_deadline
from kai_stream.core.state import ClusterState, apply
from kai_stream.emulation import Emulation, Finishing, Policy, emulation_json, finished
from kai_stream.history.reader import PoolLog

__all__ = ["CODE_VERSION", "EngineRun", "run_engine"]

CODE_VERSION = kai_stream.__version__
POLICY = Policy(recreate="never", steps=False, durations=True)
"""The cluster the engine emulates: a bound pod runs at once for its duration, an evicted one is gone for good."""


@dataclass
class EngineRun:
    """The produced log of one pool and the final state."""

    log: PoolLog
    state: ClusterState
    cycles: int = 0
    stopped_early: bool = False
    notes: list[str] = field(default_factory=list)


class _Loop:
    def __init__(
        self,
        config: SchedulerConfig,
        pool: str,
        code_version: str,
        max_cycles: int,
        remove_finished: bool,
        emulation: Emulation | None = None,
    ) -> None:
        self.config = config
        self.emulation = emulation
        self.policy = emulation.policy if emulation is not None else POLICY
        self.remove_finished = remove_finished
        self.pool = pool
        self.code_version = code_version
        self.max_cycles = max_cycles
        self.state = ClusterState()
        self.log = PoolLog(pool)
        self.head = ""
        self.finishing = Finishing(self.policy)
        self.cycles = 0
        self.stopped_early = False
        self.quiet_at: int | None = None
        """The offset of the last cycle when it returned no decision (None: the last one decided)."""
        self.wake = math.inf
        """The core's next deadline after that cycle (``core.quiet.next_deadline``), once asked."""

    def emit(self, event: ClusterEvent) -> None:
        offset = len(self.log.events)
        self.log.events.append(event)
        self.log.offsets.append(offset)
        apply(self.state, event, offset)

    def settle(self) -> None:
        """Run cycles at the current offset until one changes nothing (at most ``max_cycles``)."""
        self.quiet_at = None
        for _ in range(self.max_cycles):
            offset = self.state.offset
            linked, self.head = decide(
                self.state, self.config, pool=self.pool, head=self.head, input_offset=offset,
                code_version=self.code_version,
            )
            self.cycles += 1
            if not linked:
                self.quiet_at, self.wake = offset, math.nan
                return
            for decision, _ in linked:
                self.log.decisions.append(decision)
                self.log.decision_offsets.append(len(self.log.decision_offsets))
            again = False
            for decision, _ in linked:
                for event in self.finishing.react(decision, self.state):
                    self.emit(event)
                again |= isinstance(decision, EvictionRequested | PodPipelined)
            if self.state.offset == offset:
                return
            if self.emulation is not None and not self.emulation.repeat_after_binds and not again:
                return
        self.stopped_early = True

    def due(self, ts: float | None, before: bool) -> bool:
        if not self.finishing:
            return False
        first = self.finishing.next_at()
        return ts is None or first < ts or (not before and first == ts)

    def finish_until(self, ts: float | None, *, before: bool = False, settle: bool = True) -> None:
        """Complete the pods due by ``ts`` (``before``: strictly before it), a cycle after each completion time
        when ``settle``."""
        while self.due(ts, before):
            batch_ts = self.finishing.next_at()
            while self.finishing.next_at() == batch_ts:
                _, done = self.finishing.pop()
                if done is None:
                    continue
                pod = self.state.pods.get(done.uid)
                if pod is None or pod.node_name is None or pod.phase in ("Succeeded", "Failed"):
                    continue
                if self.policy.running and pod.phase != "Running":
                    continue
                if self.state.assumed.get(done.uid) is not None:
                    continue
                for event in finished(pod, done.decision_id, batch_ts, remove=self.remove_finished):
                    self.emit(event)
            if settle:
                self.settle()

    def fold(self, batch: Sequence[ObservedEvent], tick_cycles: bool) -> None:
        """Fold one batch and cycle after it (``run_engine``'s rules, or the recorded emulation's)."""
        if self.emulation is None:
            self.finish_until(batch[0].ts)
            only_time = all(_only_time(event, self.state) for event in batch)
            quiet = tick_cycles and only_time and self.quiet_at == self.state.offset
            if quiet and math.isnan(self.wake):
                self.wake = next_deadline(self.state, self.config, pool=self.pool)
            for event in batch:
                self.emit(event)
            if only_time and (not tick_cycles or (quiet and self.state.now < self.wake)):
                if quiet:
                    self.quiet_at = self.state.offset
                return
            self.settle()
            return
        per_event = self.emulation.cycle_every <= 0
        self.finish_until(batch[0].ts, before=True, settle=per_event)
        for event in batch:
            self.finish_until(event.ts, settle=False)
            self.emit(event)
        self.settle()


def _only_time(event: ObservedEvent, state: ClusterState) -> bool:
    if isinstance(event, Tick):
        return True
    return isinstance(event, GpuHealthObserved) and state.gpus.get(event.node) == event.gpus


def _batches(events: Sequence[ObservedEvent]) -> Iterable[list[ObservedEvent]]:
    batch: list[ObservedEvent] = []
    for event in events:
        if batch and event.ts != batch[-1].ts:
            yield batch
            batch = []
        batch.append(event)
    if batch:
        yield batch


def run_engine(
    observed: Iterable[ObservedEvent],
    config: SchedulerConfig,
    *,
    cycles: Iterable[Sequence[ObservedEvent]] | None = None,
    pool: str = "default",
    code_version: str = CODE_VERSION,
    max_cycles: int = 50,
    drain: bool = True,
    remove_finished: bool = True,
    tick_cycles: bool = True,
    emulation: Emulation | None = None,
) -> EngineRun:
    """Play ``observed`` (sorted by event time, stable) through the scheduler with an emulated cluster.

    ``cycles``: the batches to fold before each cycle, in log order (``observed`` is then ignored); by default a
    batch is the events of one event time.

    ``drain``: after the last event, let running pods finish (and pending ones start) until nothing changes.
    ``remove_finished``: delete a pod once it succeeded (as a Job's TTL controller would), keeping state small.
    ``tick_cycles=False`` skips the cycle after a batch that only advances time (ticks, GPU readings equal to
    the node's last ones): faster generation of long logs; only time-driven decisions such as stale-gang
    eviction can then come later than a live processor's. With it, such a batch cycles from the core's next
    deadline on (module doc): the decisions of a cycle after every batch.
    ``emulation``: answer and cycle as the simulated run that recorded it did (module doc); pass its
    ``max_cycles`` too.
    """
    loop = _Loop(config, pool, code_version, max_cycles, remove_finished, emulation)
    loop.log.configs.append(
        ConfigRecorded(
            ts=0.0,
            pool=pool,
            config_hash=config_hash(config),
            code_version=code_version,
            config=orjson.dumps(config.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS).decode(),
            emulation=emulation_json(emulation) if emulation is not None else "",
        )
    )
    batches = cycles if cycles is not None else _batches(sorted(observed, key=lambda e: e.ts))
    for batch in batches:
        loop.fold(batch, tick_cycles)
    if drain:
        loop.finish_until(None)
    run = EngineRun(log=loop.log, state=loop.state, cycles=loop.cycles, stopped_early=loop.stopped_early)
    if loop.stopped_early:
        run.notes.append(f"a step needed more than {max_cycles} cycles; stopped there")
    return run
