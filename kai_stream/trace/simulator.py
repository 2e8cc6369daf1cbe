"""Virtual-time, discrete-event replay of a job trace through the pure scheduler core, written as history.

Rules of the simulated world (``kai_stream.emulation.react`` under ``POLICY``, plus time):

1. Time is the trace's: job ``j`` arrives at ``submit - t0`` (``t0`` = first submission) as a PodGroup and
   its pods (``PodObserved`` pending). A job of more than 8 GPUs is a gang of 8-GPU pods (``minMember`` =
   pod count). Pods use the default priority class (``train``: preemptible).
2. Events with the same timestamp form one batch: completions first, then arrivals; then a cycle
   (``run_cycle``) runs on the state after the batch. A cycle runs only when something arrived or finished
   (a completion of a pod that was evicted since is no event).
3. Decisions are folded, then answered at the same time: ``BindRequested`` -> ``PodBound`` (the pod runs
   for its duration, then ``PodObserved`` Succeeded and ``PodRemoved``; the PodGroup is removed with its last
   pod); ``EvictionRequested`` -> ``PodEvicted`` and the pod is observed pending again (restarted from
   scratch). After evictions or pipelining the cycle is repeated at the same time (at most
   ``max_cycles_per_batch``).
   With ``cycle_every`` = P > 0, cycles run only at multiples of P (a ``Tick`` there), like KAI's periodic
   loop at a coarser period: fewer cycles, binds delayed to the next boundary.
4. History: observed events and outcomes go to ``cluster-events`` (the log the scheduler folds, so replay
   works), outcomes also to ``bind-results``; decisions (hash-chained), ``ConfigRecorded`` and
   ``FairShareRecorded`` (whenever a queue's fair share changed) to ``decisions``. Layout
   ``DIR/<topic>/0/<first offset>-<last offset>.parquet``.
5. A cycle is skipped (``skip_cycles``, on by default) only when the core says it returns no decision, so the
   history is byte for byte the one of running every cycle (a test checks it):

   * *idle* (``core.quiet.idle``): no pod is pending and no gang is stale. Every action needs a pending job
     (allocate, consolidation, reclaim, preempt) or a stale gang (stale-gang eviction), and a pending reason
     needs a pending pod. The fair shares are then the allocations (``core.quiet.shares_when_idle``).
   * *quiet*: the last cycle returned no decision, nothing but ``Tick``s was folded since, and the clock has
     not reached the core's next deadline taken after that cycle (``core.quiet.next_deadline``: the time rules
     the cycle reads). The cycle is a function of the state, and the state then differs only in ``now`` and the
     offset, which only those rules read.

   Completions are queued by the emulation (``kai_stream.emulation.Finishing``), as the what-if engine's are.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

import kai_stream
from kai_stream.core.config import SchedulerConfig, config_hash
from kai_stream.core.decide import fold_linked
from kai_stream.core.events import (
    DEFAULT_POOL,
    BindRequested,
    ConfigRecorded,
    Decision,
    EvictionRequested,
    FairShareRecorded,
    Model,
    ObservedEvent,
    PodBound,
    PodEvicted,
    PodGroupObserved,
    PodGroupRemoved,
    PodGroupSpec,
    PodObserved,
    PodPending,
    PodPipelined,
    PodSpec,
    QueueShare,
    ResourceAmounts,
    Resources,
    Tick,
    dumps,
    stable_id,
)
from kai_stream.core.quiet import idle, next_deadline, queue_shares, shares_when_idle
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.scheduler.framework.session import Session
from kai_stream.core.state import ClusterState, apply
from kai_stream.emulation import Emulation, Finishing, Policy, emulation_json, finished
from kai_stream.history.schema import event_values, write_segment
from kai_stream.trace.loaders import GPUS_PER_POD, Trace

__all__ = ["SimulationStats", "simulate_trace"]

CLUSTER_EVENTS = "cluster-events"
DECISIONS = "decisions"
BIND_RESULTS = "bind-results"
NAMESPACE = "trace"
SEGMENT_ROWS = 250_000
POLICY = Policy(recreate="restart", steps=False, running=False, durations=True)
"""The trace's cluster: a bind is its outcome alone; an evicted pod is observed pending again (restarted)."""


@dataclass
class SimulationStats:
    """What a trace run did and how long it took (wall seconds, by phase)."""

    jobs: int = 0
    pods: int = 0
    cycles: int = 0
    batches: int = 0
    decisions: int = 0
    binds: int = 0
    evictions: int = 0
    pending_reasons: int = 0
    """PodPending decisions emitted."""
    events: int = 0
    simulated_s: float = 0.0
    t0: float = 0.0
    wall_s: float = 0.0
    cycle_wall_s: float = 0.0
    skipped_cycles: int = 0
    write_wall_s: float = 0.0
    unfinished_pods: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class _Pod:
    spec: PodSpec
    job: int


def _fields(value: object) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        return value.__dict__
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _encode(event: Model) -> bytes:
    """``dumps(event)`` for an event the simulator built, about twice as fast: orjson writes each model's own
    field values. Exact because those models were validated, or copied with values of their fields' types,
    and hold no subclass of a field's model type: then pydantic's JSON-mode dump leaves every value as it is
    but tuples, which orjson writes as arrays too (an int in a float field would differ: the dump makes it a
    float). A trace test checks every history row against ``dumps``."""
    return orjson.dumps(event, default=_fields, option=orjson.OPT_SORT_KEYS)


class _Log:
    """Rows per topic (``schema.event_values`` tuples, offset = position); written as Parquet segments at the end."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[Any, ...]]] = {CLUSTER_EVENTS: [], DECISIONS: [], BIND_RESULTS: []}

    def add(self, topic: str, event: Model, value: bytes) -> int:
        """Append ``event`` with ``value``, its ``dumps``; return its offset."""
        rows = self.rows[topic]
        offset = len(rows)
        rows.append(event_values(topic, 0, offset, event, None, value))
        return offset

    def write(self, directory: Path) -> None:
        for topic, rows in self.rows.items():
            for first in range(0, len(rows), SEGMENT_ROWS):
                chunk = rows[first : first + SEGMENT_ROWS]
                last = first + len(chunk) - 1
                write_segment(chunk, directory / topic / "0", f"{first:020d}-{last:020d}")


class _Simulation:
    def __init__(
        self,
        base: list[ObservedEvent],
        config: SchedulerConfig,
        *,
        pool: str,
        max_cycles: int,
        skip: bool = True,
        cycle_every: float = 0.0,
    ) -> None:
        self.config = config
        self.pool = pool
        self.max_cycles = max_cycles
        self.state = ClusterState()
        self.log = _Log()
        self.head = ""
        self.hash = config_hash(config)
        self.version = kai_stream.__version__
        self.pods: dict[str, _Pod] = {}
        self.job_left: dict[int, int] = {}
        self.groups: dict[int, PodGroupSpec] = {}
        self.finishing = Finishing(POLICY)
        self.shares: tuple[QueueShare, ...] = ()
        """The queue shares of the last cycle (``core.quiet.queue_shares``, or ``shares_when_idle``)."""
        self.last_fair: tuple[tuple[str, ResourceAmounts], ...] = ()
        """The fair shares last recorded."""
        self.skip = skip
        self.quiet_until: float | None = None
        """After a cycle that returned no decision, with nothing but Ticks folded since: the core's next deadline
        (``core.quiet.next_deadline``), before which no cycle decides anything."""
        self.stats = SimulationStats()
        recorded = ConfigRecorded(
            ts=0.0,
            pool=pool,
            config_hash=self.hash,
            code_version=self.version,
            config=orjson.dumps(config.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS).decode(),
            emulation=emulation_json(Emulation(POLICY, cycle_every=cycle_every, max_cycles=max_cycles)),
        )
        self.log.add(DECISIONS, recorded, dumps(recorded))
        for event in base:
            self.observe(event, dumps(event))

    # ------------------------------------------------------------------ folding

    def observe(self, event: Model, value: bytes | None = None) -> None:
        """Log and fold ``event``; ``value``: its ``dumps``, made by ``_encode`` when not given."""
        offset = self.log.add(CLUSTER_EVENTS, event, _encode(event) if value is None else value)
        apply(self.state, event, offset)  # type: ignore[arg-type]
        if not isinstance(event, Tick):
            self.quiet_until = None

    def answer(self, event: Model) -> None:
        """Fold one event of the emulated cluster's answer; outcomes also go to bind-results."""
        value = _encode(event)
        if isinstance(event, PodBound | PodEvicted):
            self.log.add(BIND_RESULTS, event, value)
        self.observe(event, value)

    # ------------------------------------------------------------------ jobs and pods

    def arrive(self, index: int, job: dict[str, Any], ts: float) -> None:
        gpus, per_pod = int(job["gpus"]), int(job["gpu_milli"])
        count = max(1, math.ceil(gpus / GPUS_PER_POD)) if gpus > GPUS_PER_POD else 1
        name = f"j{index:06d}"
        group = PodGroupSpec(
            namespace=NAMESPACE,
            name=name,
            uid=stable_id("trace-group", str(job["job_id"])),
            queue=str(job["queue"]),
            min_member=count,
            created=ts,
        )
        self.groups[index] = group
        self.job_left[index] = count
        self.observe(PodGroupObserved(event_id=stable_id("pg", group.uid), ts=ts, pool=self.pool, pod_group=group))
        remaining = gpus
        for i in range(count):
            milli = per_pod if count == 1 else min(remaining, GPUS_PER_POD) * 1000
            remaining -= GPUS_PER_POD
            fraction = milli if 0 < milli < 1000 else None
            spec = PodSpec(
                namespace=NAMESPACE,
                name=f"{name}-{i}",
                uid=stable_id("trace-pod", str(job["job_id"]), str(i)),
                queue=str(job["queue"]),
                pod_group=name,
                pool=self.pool,
                requests=Resources(gpu_milli=milli, cpu_milli=int(job["cpu_milli"]), memory=int(job["memory"])),
                gpu_fraction_milli=fraction,
                labels={"trace/job-id": str(job["job_id"])},
                duration_s=float(job["duration"]),
                created=ts,
            )
            self.pods[spec.uid] = _Pod(spec, index)
            self.observe(PodObserved(event_id=stable_id("pending", spec.uid, "0"), ts=ts, pool=self.pool, pod=spec))
            self.stats.pods += 1
        self.stats.jobs += 1

    def finish(self, uid: str, ts: float, decision_id: str) -> None:
        pod = self.pods[uid]
        for event in finished(self.state.pods.get(uid) or pod.spec, decision_id, ts):
            self.observe(event)
        del self.pods[uid]
        self.job_left[pod.job] -= 1
        if self.job_left[pod.job] == 0:
            group = self.groups.pop(pod.job)
            del self.job_left[pod.job]
            self.observe(
                PodGroupRemoved(
                    event_id=stable_id("pg-removed", group.uid),
                    ts=ts,
                    pool=self.pool,
                    namespace=NAMESPACE,
                    name=group.name,
                )
            )

    # ------------------------------------------------------------------ cycles

    def run_cycle(self) -> list[Decision]:
        """``core.scheduler.cycle.run_cycle`` (snapshot reuse included), step for step, keeping the session's fair
        shares."""

        def keep_shares(session: Session) -> None:
            self.shares = queue_shares(session)

        return run_cycle(
            self.state, self.config, pool=self.pool, input_offset=self.state.offset, code_version=self.version,
            inspect=keep_shares,
        )

    def idle(self) -> bool:
        """No pod pending and no stale gang: every action and every pending reason has nothing (``core.quiet``)."""
        return idle(self.state, self.config, pool=self.pool)

    def quiet(self, ts: float) -> bool:
        """Whether the last cycle decided nothing and ``ts`` is before the core's next deadline after it."""
        return self.quiet_until is not None and ts < self.quiet_until

    def worth_a_cycle(self, ts: float) -> bool:
        """False only when a cycle provably returns no decision (the rules in the module docstring)."""
        return not self.skip or not (self.idle() or self.quiet(ts))

    def cycle(self, ts: float) -> None:
        if self.skip and self.idle():
            self.stats.skipped_cycles += 1
            self.shares_when_idle()
            self.record_shares(ts)
            return
        if self.skip and self.quiet(ts):
            self.stats.skipped_cycles += 1
            return
        for _ in range(self.max_cycles):
            started = time.perf_counter()
            made = self.run_cycle()
            self.stats.cycle_wall_s += time.perf_counter() - started
            self.stats.cycles += 1
            self.record_shares(ts)
            if not made:
                self.quiet_until = next_deadline(self.state, self.config, pool=self.pool)
                return
            self.quiet_until = None
            encoded, self.head = fold_linked(self.state, made, self.head)
            linked = [decision for decision, _ in encoded]
            again = False
            for decision, raw in encoded:
                self.log.add(DECISIONS, decision, raw)
            for decision in linked:
                again |= self.react(decision)
            self.stats.decisions += len(linked)
            self.stats.pending_reasons += sum(1 for d in linked if isinstance(d, PodPending))
            if not again:
                return

    def react(self, decision: Decision) -> bool:
        """Fold the emulated cluster's answer to ``decision`` (``POLICY``); True when the cycle should run again
        at the same time (an eviction or a pipelined pod)."""
        for event in self.finishing.react(decision, self.state):
            self.answer(event)
        if isinstance(decision, BindRequested):
            self.stats.binds += 1
            return False
        if isinstance(decision, EvictionRequested):
            self.stats.evictions += 1
            return True
        return isinstance(decision, PodPipelined)

    def shares_when_idle(self) -> None:
        """Fair shares when nothing is pending (``core.quiet.shares_when_idle``): each queue's allocation."""
        self.shares = shares_when_idle(self.state, self.config, pool=self.pool)

    def record_shares(self, ts: float) -> None:
        """Emit ``FairShareRecorded`` when the cycle's fair shares differ from the last ones recorded."""
        fair = tuple((share.queue, share.fair_share) for share in self.shares)
        if fair == self.last_fair:
            return
        self.last_fair = fair
        recorded = FairShareRecorded(
            ts=ts, pool=self.pool, input_offset=self.state.offset, config_hash=self.hash, queues=self.shares
        )
        self.log.add(DECISIONS, recorded, _encode(recorded))

    # ------------------------------------------------------------------ the loop

    def run(
        self, trace: Trace, cycle_every: float = 0.0, progress: Callable[[int, int], None] | None = None
    ) -> None:
        """Event-driven: a batch per distinct timestamp. With ``cycle_every`` > 0, the events up to the next
        multiple of it are folded at their own times, then a ``Tick`` at that boundary and one cycle (KAI's
        periodic scheduling, at a coarser period). ``progress(submitted, jobs)`` is called every 64 batches."""
        jobs = trace.jobs.to_dicts()
        t0 = float(jobs[0]["submit"]) if jobs else 0.0
        self.stats.t0 = t0
        nxt = 0
        now = 0.0
        while nxt < len(jobs) or self.finishing:
            arrival = float(jobs[nxt]["submit"]) - t0 if nxt < len(jobs) else math.inf
            completion = self.finishing.next_at()
            now = min(arrival, completion)
            if cycle_every > 0:
                now = math.ceil(now / cycle_every) * cycle_every
            happened = False
            while True:
                arrival = float(jobs[nxt]["submit"]) - t0 if nxt < len(jobs) else math.inf
                completion = self.finishing.next_at()
                if min(arrival, completion) > now:
                    break
                if completion <= arrival:
                    _, done = self.finishing.pop()
                    if done is not None:
                        self.finish(done.uid, done.ts, done.decision_id)
                        happened = True
                else:
                    self.arrive(nxt, jobs[nxt], arrival)
                    nxt += 1
                    happened = True
            if cycle_every > 0:
                self.observe(Tick(event_id=stable_id("tick", str(now)), ts=now, pool=self.pool))
            elif not happened:
                continue
            self.stats.batches += 1
            self.cycle(now)
            if progress is not None and self.stats.batches % 64 == 0:
                progress(nxt, len(jobs))
        if progress is not None:
            progress(nxt, len(jobs))
        self.stats.simulated_s = now
        self.stats.unfinished_pods = len(self.pods)


def simulate_trace(
    trace: Trace,
    base: list[ObservedEvent],
    config: SchedulerConfig,
    history: str | Path,
    *,
    pool: str = DEFAULT_POOL,
    max_cycles_per_batch: int = 8,
    cycle_every: float = 0.0,
    skip_cycles: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> SimulationStats:
    """Run ``trace`` on the cluster ``base`` (Nodes, Queues … as observed events) and write the history.
    ``skip_cycles=False`` runs every cycle (the history is the same; see rule 5)."""
    started = time.perf_counter()
    sim = _Simulation(
        base, config, pool=pool, max_cycles=max_cycles_per_batch, skip=skip_cycles, cycle_every=cycle_every
    )
    sim.run(trace, cycle_every, progress)
    stats = sim.stats
    write_started = time.perf_counter()
    sim.log.write(Path(history))
    stats.write_wall_s = time.perf_counter() - write_started
    stats.events = sum(len(rows) for rows in sim.log.rows.values())
    stats.notes = list(trace.notes)
    stats.wall_s = time.perf_counter() - started
    return stats
