"""The processor's I/O around ``PartitionEngine``: rebuild on assignment, fold a batch, cycle, publish.

``SchedulerRuntime.submit`` is what the faust agent calls with each batch of cluster-events records: it folds,
cycles and hands every decision to the producer, and returns the deliveries; the agent commits the batch's
offsets only once they are all acknowledged, while it already folds the next batch (``process`` does both in
one call). Decisions keep their order: one producer, one partition per pool.

A cycle's records for one pool (its ``ConfigRecorded`` when due, then its decisions) reach the decisions topic
atomically when a ``send_unit`` is given: the faust agent's sends them as one record batch, which the partition
appends whole or not at all; the transactional loop's (Apache Kafka) fills record batches inside the batch's
transaction. Either way a processor killed while publishing never leaves half a cycle for the binder, a rebuild or
replay to read. Without one (tests that publish record by record) they are sent one at a time. A decision goes out
as the canonical bytes the cycle made for its hash (``Outgoing.encoded``), not encoded again.

Between cycles the processor keeps a large, long-lived state (every pod and node of its pools); it is moved
out of the cyclic garbage collector's reach (``gc.freeze``) once the first batch after a rebuild is decided (the
rebuild decodes and folds with the collector paused, so nothing rescans the state before that) and then every
``gc_freeze_interval_s`` (when set: it acts on the whole process), after a collection of what is young, so
collections stop rescanning it; by ``submit``, or between batches by a caller that turns ``settle_in_submit`` off.
Fair shares (the ``on_fair_share`` cache) are computed on a Tick of a pool only when something other than
ticks changed the pool since they were last computed, and at most every ``fair_share_interval_s``: each
computation opens a full session.
With ``cycle_on_tick`` only a Tick starts a cycle (for the pools it touched, at once, never deferred): the
other records are folded and wait for it.
Queue metrics (``queue_metrics.py``): a pool's fair share and allocation gauges are set from the session of its
cycle at most every ``metrics_interval_s``; evictions are counted from every cycle's decisions.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiokafka import TopicPartition

import kai_stream
from kai_stream.core.config import SchedulerConfig, load_config
from kai_stream.core.events import (
    ALL_POOLS,
    MAX_NAME,
    ClusterEvent,
    DeadLetter,
    DecisionsRecord,
    MalformedEvent,
    Model,
    Tick,
    loads_cluster_event,
    loads_decisions_record,
)
from kai_stream.core.gcpause import paused_gc, settle_heap
from kai_stream.core.scheduler.framework.session import Session
from kai_stream.kafka import READ_TO_END_WAIT_MS, UnitTooLarge, make_consumer, partition_for, read_to_end, read_topic
from kai_stream.observability import CYCLE_DURATION, DEAD_LETTERS, DECISIONS, EVENTS_CONSUMED, EVENTS_PUBLISHED
from kai_stream.settings import KafkaSettings
from kai_stream.streams import snapshots, startup
from kai_stream.streams.engine import Outgoing, PartitionEngine
from kai_stream.streams.queue_metrics import QueueMeter
from kai_stream.topics import TopicNames
from kai_stream.urgency import is_feedback

log = logging.getLogger(__name__)

Send = Callable[[str, int, bytes, Model], Awaitable[Awaitable[Any]]]
SendUnit = Callable[[str, int, bytes, Sequence[bytes]], Awaitable[Awaitable[Any]]]
"""Publish encoded records on one partition as one unit (all appended or none); returns the delivery to await, whose
result's ``offset`` is the unit's first."""
COMPONENT = "processor"


class InRecord(NamedTuple):
    """One consumed cluster-events record (what the loop takes off the consumer, or the agent hands over from a
    faust event). A tuple: a burst makes thousands of them on the batch's path, at a fraction of a frozen
    dataclass's cost each."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


def load_scheduler_config(path: str | None) -> SchedulerConfig:
    return load_config(path) if path else SchedulerConfig()


@dataclass(frozen=True)
class _Built:
    """A partition's engine rebuilt from the logs, not yet the runtime's: where its decisions read ended, and the
    pools each folded Tick touched (by offset)."""

    engine: PartitionEngine
    decisions_end: int
    ticks: list[tuple[int, set[str]]]


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark a background task's failure as seen (it is reported where the task is awaited, if ever)."""
    if not task.cancelled():
        task.exception()


class SchedulerRuntime:
    """Per-partition engines of one processor instance, and how they meet the topics."""

    def __init__(
        self,
        kafka: KafkaSettings,
        names: TopicNames,
        config: SchedulerConfig,
        send: Send,
        *,
        partitions: int,
        code_version: str = kai_stream.__version__,
        max_cycle_delay_s: float = 0.0,
        fair_share_interval_s: float = 10.0,
        gc_freeze_interval_s: float | None = None,
        cycle_on_tick: bool = False,
        metrics_interval_s: float = 1.0,
        send_unit: SendUnit | None = None,
    ) -> None:
        self.kafka = kafka
        self.send_unit = send_unit
        self.names = names
        self.config = config
        self.code_version = code_version
        self.send = send
        self.partitions = partitions
        self.engines: dict[int, PartitionEngine] = {}
        self.max_cycle_delay_s = max_cycle_delay_s
        self.cycle_on_tick = cycle_on_tick
        self._deferred: dict[int, set[str]] = defaultdict(set)
        self._last_cycle: dict[int, float] = {}
        self._last_cost: dict[int, float] = {}
        self.on_decisions: list[Callable[[list[Outgoing]], None]] = []
        self.on_fair_share: list[Callable[[str, dict[str, dict[str, float]]], None]] = []
        self.fair_share_interval_s = fair_share_interval_s
        self.gc_freeze_interval_s = gc_freeze_interval_s
        self._fair_share_stale: dict[int, set[str]] = defaultdict(set)
        self._rebuilt_ticks: dict[int, set[str]] = {}
        self._ahead: dict[int, asyncio.Task[_Built]] = {}
        self._letting_out: set[asyncio.Task[None]] = set()
        self._fair_share_at: dict[tuple[int, str], float] = {}
        self._frozen_at = time.monotonic()
        self.metrics_interval_s = metrics_interval_s
        self._meters: dict[str, QueueMeter] = {}
        self._metered_at: dict[tuple[int, str], float] = {}
        self._held: tuple[int, set[int]] = (-1, set())
        self.state_topic: str | None = None
        """The snapshot topic a rebuild starts from when set (``exactly_once.py`` on Apache Kafka,
        ``acked_snapshots.py`` on Tansu)."""
        self.decisions_end: dict[int, int] = {}
        self.settle_cpu_s = 0.0
        """CPU seconds spent settling the heap (``settle_heap``), all told."""
        self.settle_in_submit = True
        """Whether ``submit`` settles the heap when due; off where the caller settles it between batches."""
        """Per partition: the decisions topic's offset past the last decision this engine has folded."""

    def revoked(self, partitions: Collection[int], generation: int) -> None:
        """A rebalance took ``partitions`` away (in group ``generation``): their state is held until the assignment
        that ends the rebalance says whether they come back (``assigned``)."""
        self._held = (generation, {p for p in partitions if p in self.engines})

    def assigned(self, partitions: Collection[int], generation: int, *, ahead: bool = False) -> None:
        """The rebalance's new assignment (group ``generation``): keep the state of a partition revoked in the
        generation just before and assigned again, as nobody else can have owned it in between (faust's eager
        rebalance revokes everything, then assigns); drop every other (a later record of it rebuilds it).
        ``ahead``: start rebuilding the assigned partitions without state now, concurrently, instead of when each
        one's first record arrives (used when called from within the event loop)."""
        held_generation, held = self._held
        keep = held & set(partitions) if generation == held_generation + 1 else set()
        self._held = (-1, set())
        self.forget([p for p in sorted(set(self.engines) | set(self._ahead)) if p not in keep])
        if ahead:
            self._build_ahead(set(partitions) - set(self.engines))

    def forget(self, partitions: Sequence[int]) -> None:
        """Drop the state of revoked partitions; a later assignment rebuilds it."""
        for partition in partitions:
            self.engines.pop(partition, None)
            building = self._ahead.pop(partition, None)
            if building is not None:
                building.cancel()
            self._deferred.pop(partition, None)
            self._fair_share_stale.pop(partition, None)
            self.decisions_end.pop(partition, None)

    def forget_all(self) -> None:
        """Drop every partition's state, and every build ahead."""
        self.forget(sorted(set(self.engines) | set(self._ahead)))

    def deferred(self, partition: int) -> bool:
        """Whether pools of ``partition`` folded records whose cycle was put off."""
        return bool(self._deferred.get(partition))

    def _new_engine(self, partition: int) -> PartitionEngine:
        return PartitionEngine.for_config(partition, self.config, self.code_version)

    async def _read_partition(self, topic: str, partition: int, start: int = 0) -> list[Any]:
        consumer = make_consumer(self.kafka, group_id=None, fetch_max_wait_ms=READ_TO_END_WAIT_MS)
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            if start:
                consumer.seek(tp, start)
            else:
                await consumer.seek_to_beginning(tp)
            return await read_to_end(consumer, timeout_s=60.0)
        finally:
            await consumer.stop()

    async def _read_from_start(
        self, tps: Collection[tuple[str, int]], starts: dict[tuple[str, int], int] | None = None
    ) -> dict[tuple[str, int], list[Any]]:
        """Each (topic, partition) of ``tps`` from its beginning (or its offset in ``starts``) to its end, all read by
        one consumer."""
        read: dict[tuple[str, int], list[Any]] = {tp: [] for tp in tps}
        consumer = make_consumer(self.kafka, group_id=None, fetch_max_wait_ms=READ_TO_END_WAIT_MS)
        await consumer.start()
        try:
            assigned = [TopicPartition(topic, partition) for topic, partition in sorted(read)]
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            for tp in assigned:
                start = (starts or {}).get((tp.topic, tp.partition), 0)
                if start:
                    consumer.seek(tp, start)
            for record in await read_to_end(consumer, timeout_s=60.0):
                read[(record.topic, record.partition)].append(record)
        finally:
            await consumer.stop()
        return read

    async def _read_through(self, partition: int, needed: int, timeout_s: float = 60.0, start: int = 0) -> list[Any]:
        """Cluster-events of ``partition`` from ``start`` to its end, and at least through offset ``needed`` (the
        last one an earlier instance consumed: never delivered to this one). A read that ends short of it (the
        broker reported a low end for a moment) goes on from where it stopped; no event may be skipped."""
        records = await self._read_partition(self.names.cluster_events, partition, start)
        deadline = time.monotonic() + timeout_s
        while (records[-1].offset if records else -1) < needed:
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster-events partition {partition} not readable through offset {needed}")
            more = await self._read_partition(
                self.names.cluster_events, partition, start=records[-1].offset + 1 if records else 0
            )
            if not more:
                await asyncio.sleep(0.05)
            records.extend(more)
        return records

    async def rebuild(self, partition: int, before: int) -> PartitionEngine:
        """State of ``partition`` from its whole log (to the fetch high-watermark) and its published decisions
        (see engine.rebuild), or from its last snapshot and what both logs hold past it (``state_topic``); both
        logs are read at once. Reading to the end rather than to ``before`` means a (re)started processor decides
        once on the current state instead of once per historical batch. The partition is this processor's, so no
        decision of it is published while they are read (a recorded decision whose input event the read has not
        reached waits in the engine's ``awaiting``)."""
        return self._install(await self._build(partition, before - 1), before)

    async def _build(
        self,
        partition: int,
        needed: int,
        reading: asyncio.Future[dict[tuple[str, int], list[Any]]] | None = None,
        resume: asyncio.Future[dict[int, snapshots.Snapshot | None]] | None = None,
    ) -> _Built:
        """The rebuilt engine of ``partition``, having folded its log at least through offset ``needed``; from
        both logs as ``reading`` read them for several partitions at once, when given: from the start, or past the
        snapshots ``resume`` found."""
        started = time.monotonic()
        engine = self._new_engine(partition)
        decisions_from = 0
        resumed = ""
        snapshot = None
        if resume is not None:
            snapshot = (await asyncio.shield(resume))[partition]
        elif self.state_topic is not None:
            snapshot = await snapshots.latest(self.kafka, self.state_topic, partition, usable_by=engine)
        startup.reached("snapshot read")
        if snapshot is not None:
            engine, decisions_from = snapshot.engine, snapshot.decisions_from
            resumed = f" after its snapshot at offset {engine.offset}"
        decisions_end = decisions_from
        if reading is not None:
            read = await asyncio.shield(reading)  # shared: a partition revoked meanwhile leaves the others' read
            published, logged = read[(self.names.decisions, partition)], read[(self.names.cluster_events, partition)]
        else:
            published, logged = await asyncio.gather(
                self._read_partition(self.names.decisions, partition, decisions_from),
                self._read_through(partition, needed, start=engine.offset + 1),
            )
        startup.reached("logs read")
        with paused_gc():  # what it decodes is the rebuilt state: collections meanwhile would rescan it
            recorded: list[DecisionsRecord] = []
            for record in published:
                decisions_end = record.offset + 1
                try:
                    recorded.append(loads_decisions_record(record.value or b""))
                except MalformedEvent:
                    continue
            events: list[tuple[int, ClusterEvent]] = []
            last = -1
            malformed: list[tuple[InRecord, str]] = []
            for record in logged:
                last = record.offset
                raw = InRecord(partition, record.offset, record.key, record.value, record.timestamp)
                try:
                    events.append((record.offset, self.decode(raw)))
                except MalformedEvent as exc:
                    malformed.append((raw, str(exc)))
        if malformed and reading is not None:
            # off the rebuild's path (it reads the whole dead-letter topic); a build ahead is in no transaction
            self._letting_out.add(task := asyncio.get_running_loop().create_task(self._dead_letter_missing(malformed)))
            task.add_done_callback(self._let_out)
        elif malformed:
            await self._dead_letter_missing(malformed)
        with paused_gc():
            engine.rebuild(events, recorded)
        startup.reached("rebuilt")
        engine.offset = max(engine.offset, last)
        ticks = [
            (offset, set(engine.pools) if event.pool == ALL_POOLS else {event.pool})
            for offset, event in events
            if isinstance(event, Tick)
        ]
        log.info(
            "processor: rebuilt partition %d to offset %d (%d events, %d decisions%s) in %.2fs",
            partition, engine.offset, len(events), len(recorded),
            resumed, time.monotonic() - started,
        )
        return _Built(engine, decisions_end, ticks)

    def _install(self, built: _Built, before: int) -> PartitionEngine:
        """Make a rebuilt engine the partition's, whose first record delivered by the group is at ``before``:
        the ticks folded from there on count as ticked (their pools' fair shares are refreshed)."""
        engine = built.engine
        partition = engine.partition
        engine.offset = max(engine.offset, before - 1)
        self.decisions_end[partition] = built.decisions_end
        self._rebuilt_ticks[partition] = {pool for offset, pools in built.ticks if offset >= before for pool in pools}
        self.engines[partition] = engine
        self._fair_share_stale[partition].update(engine.pools)
        self._frozen_at = -math.inf  # settled once its first batch is decided (``settle_due``), not before
        return engine

    def _build_ahead(self, partitions: Collection[int]) -> None:
        """Start rebuilding ``partitions`` now, before their first record is delivered (``ahead``): their latest
        snapshots (with a snapshot topic) are read by one consumer, then both logs of them all, from the start or
        past each snapshot, by another."""
        if not partitions:
            return
        loop = asyncio.get_running_loop()
        resume = None
        if self.state_topic is not None:
            fresh = {partition: self._new_engine(partition) for partition in partitions}
            resume = loop.create_task(snapshots.latest_of(self.kafka, self.state_topic, fresh))
            resume.add_done_callback(_retrieved)
        reading = loop.create_task(self._read_past(sorted(partitions), resume))
        reading.add_done_callback(_retrieved)
        for partition in sorted(partitions):
            task = loop.create_task(self._build(partition, -1, reading, resume))
            task.add_done_callback(_retrieved)
            self._ahead[partition] = task

    async def _read_past(
        self, partitions: list[int], resume: asyncio.Future[dict[int, snapshots.Snapshot | None]] | None
    ) -> dict[tuple[str, int], list[Any]]:
        """Both logs of ``partitions``, read by one consumer: from the start, or past the snapshots of ``resume``."""
        starts: dict[tuple[str, int], int] = {}
        for partition, snapshot in (await asyncio.shield(resume) if resume is not None else {}).items():
            if snapshot is not None:
                starts[(self.names.cluster_events, partition)] = snapshot.engine.offset + 1
                starts[(self.names.decisions, partition)] = snapshot.decisions_from
        topics = (self.names.decisions, self.names.cluster_events)
        return await self._read_from_start([(t, p) for t in topics for p in partitions], starts)

    async def _rebuilt(self, partition: int, before: int) -> PartitionEngine:
        """The engine of ``partition`` whose first delivered record is at ``before``: the one built ahead when it
        has folded everything before that offset (records an earlier owner consumed are never delivered again),
        else one rebuilt now."""
        ahead = self._ahead.pop(partition, None)
        if ahead is not None:
            try:
                built = await ahead
            except Exception as exc:
                log.warning("processor: building partition %d ahead failed: %r; rebuilding", partition, exc)
            else:
                if built.engine.offset >= before - 1:
                    return self._install(built, before)
                log.info("processor: partition %d was built ahead to offset %d, its records start at %d; rebuilding",
                         partition, built.engine.offset, before)
        return await self.rebuild(partition, before)

    @property
    def letting_out(self) -> bool:
        """Whether malformed records a rebuild found are still being dead-lettered (in the background): a snapshot
        taken now would cover records that may never get their dead letter."""
        return bool(self._letting_out)

    def _let_out(self, task: asyncio.Task[None]) -> None:
        self._letting_out.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("processor: dead-lettering records found in a rebuild failed: %r", task.exception())

    def settle_due(self, late: float = 1.0) -> bool:
        """Whether ``gc_freeze_interval_s`` (times ``late``) has passed since the heap was last settled."""
        interval = self.gc_freeze_interval_s
        return interval is not None and time.monotonic() - self._frozen_at >= interval * late

    def settle_heap(self) -> None:
        """Collect young garbage, then freeze every surviving object (the state) out of later collections."""
        started = time.thread_time()
        settle_heap()
        self._frozen_at = time.monotonic()
        self.settle_cpu_s += time.thread_time() - started

    def decode(self, record: InRecord) -> ClusterEvent:
        """The event of one cluster-events record; ``MalformedEvent`` (the dead letter's reason) when it does not
        decode within the schema's bounds or names a pool whose partition is not the record's (a pool has one
        chain, on its own partition)."""
        try:
            event = loads_cluster_event(record.value or b"")
        except MalformedEvent as exc:
            raise MalformedEvent(f"malformed cluster event: {exc}") from exc
        if event.pool != ALL_POOLS:
            home = partition_for(event.pool, self.partitions)
            if home != record.partition:
                raise MalformedEvent(
                    f"misrouted cluster event: pool {event.pool!r} belongs to partition {home}, "
                    f"found on partition {record.partition}"
                )
        return event

    async def _dead_letter_missing(self, malformed: Sequence[tuple[InRecord, str]]) -> None:
        """Dead-letter the malformed records that have no dead letter yet. Whether an earlier instance sent one
        cannot be told from the committed offset: the consumer may commit what it fetched before a kill let the
        letters out, so the dead-letter topic itself is asked (letters have stable ids)."""
        parked: set[str] = set()
        for record in await read_topic(self.kafka, self.names.dead_letter, timeout_s=60.0):
            try:
                parked.add(DeadLetter.model_validate_json(record.value or b"").event_id)
            except ValueError:
                continue
        topic = self.names.cluster_events
        letters = [
            await self._dead_letter(raw, reason)
            for raw, reason in malformed
            if DeadLetter.id_for(topic, raw.partition, raw.offset) not in parked
        ]
        if letters:
            await asyncio.gather(*letters)

    async def _dead_letter(self, record: InRecord, reason: str) -> Awaitable[Any]:
        letter = DeadLetter.from_raw(
            topic=self.names.cluster_events,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=record.value,
            reason=reason,
            ts=record.timestamp_ms / 1000,
        )
        DEAD_LETTERS.labels(component=COMPONENT, topic=self.names.cluster_events).inc()
        return await self.send(self.names.dead_letter, 0, (record.key or b"")[:MAX_NAME], letter)

    def _defer(self, partition: int, pools: set[str], backlog: Callable[[int, int], int] | None) -> bool:
        """Under a backlog, fold more before deciding: for as long as the last cycle took (so at most about half
        the time goes to cycles), never more than ``max_cycle_delay_s`` since the last cycle. A cheap cycle is not
        deferred far, which keeps the decision latency near the cycle cost."""
        if backlog is None or self.max_cycle_delay_s <= 0:
            return False
        engine = self.engines[partition]
        now = time.monotonic()
        waited = now - self._last_cycle.setdefault(partition, now)
        limit = min(self.max_cycle_delay_s, self._last_cost.get(partition, 0.0))
        if waited < limit and backlog(partition, engine.offset) > 0:
            self._deferred[partition].update(pools)
            return True
        return False

    async def process(
        self, batch: Sequence[InRecord], backlog: Callable[[int, int], int] | None = None
    ) -> list[Outgoing]:
        """``submit`` the batch and wait until every record it published is on the broker."""
        published, deliveries = await self.submit(batch, backlog)
        if deliveries:
            await asyncio.gather(*deliveries)
        return published

    async def submit(
        self, batch: Sequence[InRecord], backlog: Callable[[int, int], int] | None = None
    ) -> tuple[list[Outgoing], list[Awaitable[Any]]]:
        """Fold a batch, run the touched pools' cycles, hand their decisions to the producer; return what was
        published and the deliveries to await before the batch's offsets may be committed. Feedback
        (``urgency.is_feedback``: a bind confirmed, our pod seen where we bound it) is folded but touches no pool: it
        cannot change what a cycle decides, so a batch of it alone runs none.

        ``backlog(partition, last_offset)`` says how many records of the partition are known to follow; while
        there are, cycles wait for them (as long as the last cycle took, up to ``max_cycle_delay_s``), so a busy
        partition decides on bigger batches. Which offsets get a cycle does not matter to replay: decisions record
        their input offset.
        """
        deliveries: list[Awaitable[Any]] = []
        touched: dict[int, set[str]] = defaultdict(set)
        ticked: dict[int, set[str]] = defaultdict(set)
        missing: dict[int, int] = {}
        for record in batch:
            if record.partition not in self.engines:
                missing.setdefault(record.partition, record.offset)
        if missing:
            rebuilt = await asyncio.gather(*(self._rebuilt(p, first) for p, first in sorted(missing.items())))
            for partition, engine in zip(sorted(missing), rebuilt, strict=True):
                touched[partition].update(engine.pools)
                ticked[partition].update(self._rebuilt_ticks.pop(partition, set()))
        consumed: Counter[str] = Counter()
        engines, decode = self.engines, self.decode
        for partition, count in sorted(Counter(record.partition for record in batch).items()):
            engines[partition].expect(count)
        for record in batch:
            partition, offset = record.partition, record.offset
            engine = engines[partition]
            if offset <= engine.offset:
                continue
            try:
                event = decode(record)
            except MalformedEvent as exc:
                engine.offset = offset
                deliveries.append(await self._dead_letter(record, str(exc)))
                continue
            consumed[event.type] += 1
            folded = engine.fold(offset, event)
            if not is_feedback(event):
                touched[partition].update(folded)
            if isinstance(event, Tick):
                ticked[partition].update(folded)
            else:
                self._fair_share_stale[partition].update(folded)
        for kind, count in sorted(consumed.items()):
            EVENTS_CONSUMED.labels(component=COMPONENT, topic=self.names.cluster_events, type=kind).inc(count)
        published: list[Outgoing] = []
        if self.cycle_on_tick:
            touched, backlog = ticked, None
        for partition in sorted(set(touched) | set(self._deferred)):
            owned = self.engines.get(partition)
            if owned is None:
                continue
            pools: set[str] = touched.get(partition, set()) | self._deferred.get(partition, set())
            if self._defer(partition, pools, backlog):
                continue
            self._deferred.pop(partition, None)
            inspect = self._due_meters(partition, pools)
            started = time.perf_counter()
            out = owned.cycle(pools, inspect)
            elapsed = time.perf_counter() - started
            self._last_cycle[partition] = time.monotonic()
            self._last_cost[partition] = elapsed
            for pool in pools:
                CYCLE_DURATION.labels(pool=pool).observe(elapsed / max(len(pools), 1))
            deliveries.extend(await self._publish(out))
            self._count_published(out)
            for pool in sorted({item.pool for item in out}):
                self._meter(pool).decisions(item.record for item in out if item.pool == pool)
            published.extend(out)
            self._fair_share_stale[partition].update(item.pool for item in out)
        for partition in sorted(ticked):
            self._refresh_fair_shares(partition, ticked[partition])
        if published:
            for notify in self.on_decisions:
                notify(published)
        if self.settle_in_submit and self.settle_due():
            self.settle_heap()
        return published, deliveries

    def _count_published(self, out: list[Outgoing]) -> None:
        """The Prometheus counters of a cycle's records: one increment per label set, not per record."""
        published: Counter[str] = Counter()
        decided: Counter[tuple[str, str, str]] = Counter()
        for item in out:
            kind = str(getattr(item.record, "type", ""))
            published[kind] += 1
            if hasattr(item.record, "action"):
                decided[(item.pool, kind, str(item.record.action))] += 1
        for kind, count in sorted(published.items()):
            EVENTS_PUBLISHED.labels(component=COMPONENT, topic=self.names.decisions, type=kind).inc(count)
        for (pool, kind, action), count in sorted(decided.items()):
            DECISIONS.labels(pool=pool, kind=kind, action=action).inc(count)

    async def _publish(self, out: list[Outgoing]) -> list[Awaitable[Any]]:
        """Hand a cycle's records to the producer: each pool's as one unit when ``send_unit`` is set."""
        topic = self.names.decisions
        deliveries: list[Awaitable[Any]] = []
        for pool in sorted({item.pool for item in out}):
            items = [item for item in out if item.pool == pool]
            target, key = partition_for(pool, self.partitions), pool.encode()
            if self.send_unit is not None:
                try:
                    delivery = await self.send_unit(topic, target, key, [item.value() for item in items])
                    deliveries.append(self._track(target, len(items), delivery))
                    continue
                except UnitTooLarge as exc:
                    log.error("processor: pool %s: %s; its cycle is sent record by record (not atomic)", pool, exc)
            for record in (item.record for item in items):
                deliveries.append(self._track(target, 1, await self.send(topic, target, key, record)))
        return deliveries

    def _track(self, partition: int, count: int, delivery: Awaitable[Any]) -> Awaitable[Any]:
        """Move ``decisions_end`` past ``count`` records of ``partition`` once their delivery says where they
        landed (a unit's delivery names its first offset), before whoever awaits the delivery resumes."""
        if isinstance(delivery, asyncio.Future):
            delivery.add_done_callback(functools.partial(self._delivered, partition, count))
        return delivery

    def _delivered(self, partition: int, count: int, delivery: asyncio.Future[Any]) -> None:
        if delivery.cancelled() or delivery.exception() is not None or partition not in self.engines:
            return
        offset = getattr(delivery.result(), "offset", None)
        if isinstance(offset, int) and offset >= 0:
            self.decisions_end[partition] = max(self.decisions_end.get(partition, 0), offset + count)

    def _meter(self, pool: str) -> QueueMeter:
        meter = self._meters.get(pool)
        if meter is None:
            meter = self._meters[pool] = QueueMeter(pool)
        return meter

    def _due_meters(self, partition: int, pools: set[str]) -> dict[str, Callable[[Session], None]]:
        """The pools whose queue gauges this cycle sets (each at most every ``metrics_interval_s``): measuring makes
        a cycle that would decide nothing open its session all the same."""
        now = time.monotonic()
        due: dict[str, Callable[[Session], None]] = {}
        for pool in sorted(pools):
            last = self._metered_at.get((partition, pool))
            if last is None or now - last >= self.metrics_interval_s:
                due[pool] = functools.partial(self._measure, partition, pool)
        return due

    def _measure(self, partition: int, pool: str, session: Session) -> None:
        self._metered_at[(partition, pool)] = time.monotonic()
        self._meter(pool).session(session)

    def _refresh_fair_shares(self, partition: int, pools: set[str]) -> None:
        engine = self.engines.get(partition)
        stale = self._fair_share_stale.get(partition)
        if engine is None or not stale or not self.on_fair_share:
            return
        now = time.monotonic()
        for pool in sorted(pools & stale):
            last = self._fair_share_at.get((partition, pool))
            if last is not None and now - last < self.fair_share_interval_s:
                continue
            shares = engine.fair_shares(pool)
            stale.discard(pool)
            self._fair_share_at[(partition, pool)] = now
            for remember in self.on_fair_share:
                remember(pool, shares)
