"""The binder's I/O loop: consume the decisions topic, apply the planned actions, publish outcomes, commit.

A decision at an offset at or past the partition's end as this binder first fetched it (after an assignment) is
fresh: no earlier binder can have applied it, so its bind is POSTed without reading the pod first (the
apiserver's 409/404 still decide a race, see ``kube.py``); older records may be re-deliveries and are checked
first, so a restart never sends a second binding POST for a pod.

Batches are pipelined: the next poll does not wait for the batches in flight (at most ``max_in_flight``), so a
slow API call delays only its own pod. Each pod's actions still run in log order, across batches too (a lane
waits for the pod's previous lane), and a decision planned in a batch in flight is not planned again.

At-least-once and idempotent: a partition's offset is committed (``{tp: last.offset + 1}``) only after every
action of that batch and of every earlier batch of the partition went through the API and their outcomes were
acknowledged by the broker, so a crash re-delivers unfinished work; applying a decision twice is harmless
(``kube.py`` checks the pod first and outcome bytes depend only on the decision). On a rebalance the batches
in flight finish and are committed before the partitions go. Undecodable records go to the dead-letter topic
with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError
from kubernetes_asyncio import client

from kai_stream import succession
from kai_stream.binder.kube import DEFAULT_RETRY, KubeApplier, RetryPolicy, api_client
from kai_stream.binder.plan import Action, lanes, plan, pod_key
from kai_stream.binder.view import RoomView
from kai_stream.core.events import (
    MAX_NAME,
    DeadLetter,
    DecisionsRecord,
    MalformedEvent,
    Outcome,
    dumps,
    loads_decisions_record,
)
from kai_stream.hoptrace import HopTrace
from kai_stream.internals import member_id
from kai_stream.kafka import Record, make_consumer, make_producer, send_keyed
from kai_stream.observability import (
    BINDER_OUTCOMES,
    CONSUMER_LAG,
    DEAD_LETTERS,
    EVENTS_CONSUMED,
    EVENTS_PUBLISHED,
    Health,
)
from kai_stream.quirks import feedback_linger_ms
from kai_stream.settings import KafkaSettings
from kai_stream.topics import DEFAULT_TOPICS, TopicNames
from kai_stream.urgency import is_feedback

log = logging.getLogger(__name__)

COMPONENT = "binder"
DEFAULT_GROUP_ID = "kai-stream-binder"
_APPLIED_MEMORY = 100_000
_REVOKE_WAIT_S = 30.0


@dataclass
class _Batch:
    """One polled batch of one partition: the offset to commit once it and the batches before it are done."""

    end: int
    generation: int
    done: bool = False


class _Planned(Collection[str]):
    """Decision ids applied (remembered) or being applied by a batch in flight: ``plan`` skips them."""

    def __init__(self, applied: Collection[str], in_flight: Collection[str]) -> None:
        self.applied = applied
        self.in_flight = in_flight

    def __contains__(self, item: object) -> bool:
        return item in self.in_flight or item in self.applied

    def __iter__(self) -> Iterator[str]:
        yield from self.in_flight
        yield from self.applied

    def __len__(self) -> int:
        return len(self.in_flight) + len(self.applied)


class Binder:
    """One binder instance: a decisions consumer, an outcomes producer and a Kubernetes applier."""

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        applier: KubeApplier,
        *,
        topics: TopicNames,
        pool_filter: Collection[str] | None = None,
        concurrency: int = 64,
        max_batch: int = 1000,
        max_in_flight: int = 16,
        health: Health | None = None,
    ) -> None:
        self.consumer = consumer
        self.max_batch = max_batch
        self.producer = producer
        self.applier = applier
        self.topics = topics
        self.pool_filter = frozenset(pool_filter) if pool_filter is not None else None
        self.health = health
        self._slots = asyncio.Semaphore(concurrency)
        self._applied: OrderedDict[str, None] = OrderedDict()
        self._done: dict[TopicPartition, int] = {}
        self._commit_lock = asyncio.Lock()
        self._commit_wanted = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._batch_slots = asyncio.Semaphore(max_in_flight)
        self._in_flight: set[asyncio.Task[None]] = set()
        self._in_flight_ids: set[str] = set()
        self._batches: dict[TopicPartition, deque[_Batch]] = {}
        self._generation: dict[TopicPartition, int] = {}
        self._pod_tail: dict[str, asyncio.Future[None]] = {}
        self._failure: BaseException | None = None
        self._fresh_from: dict[TopicPartition, int] = {}
        self._hops = HopTrace("binder")

    async def run(self, stop: asyncio.Event) -> None:
        """Process batches until ``stop`` is set; finishes the batches in flight and commits on the way out."""
        try:
            while not stop.is_set():
                if self._failure is not None:
                    raise self._failure
                batches = await self.consumer.getmany(timeout_ms=100, max_records=self.max_batch)
                if self.health is not None:
                    self.health.beat()
                fetched = time.time()
                for tp, records in sorted(batches.items()):
                    self._hops.batch(tp.partition, records[0].offset, records[-1].offset, fetched=fetched)
                    await self._batch_slots.acquire()
                    try:
                        await self.start(tp, records)
                    except BaseException:
                        self._batch_slots.release()
                        raise
            await self.wait_idle()
            if self._failure is not None:
                raise self._failure
        except asyncio.CancelledError:
            for task in list(self._in_flight):  # killed: unfinished batches stay uncommitted, to be re-delivered
                task.cancel()
            raise
        finally:
            await asyncio.shield(self._commit_quietly())

    async def wait_idle(self) -> None:
        """Until no batch is in flight."""
        await self._idle.wait()

    async def on_revoked(self, revoked: Collection[TopicPartition]) -> None:
        """Before partitions move: let the batches in flight finish, commit them, forget what was not committed."""
        try:
            await asyncio.wait_for(self._idle.wait(), _REVOKE_WAIT_S)
        except TimeoutError:
            log.warning("binder: batch still running at rebalance; its work will be re-delivered and re-checked")
        await self._commit_quietly(set(revoked))
        for tp in revoked:
            self._done.pop(tp, None)
            self._batches.pop(tp, None)
            self._generation[tp] = self._generation.get(tp, 0) + 1
            self._fresh_from.pop(tp, None)

    async def process(self, tp: TopicPartition, records: list[Record]) -> None:
        """Apply one partition's batch and publish its outcomes; mark it done (committed once earlier ones are)."""
        await self.start(tp, records)
        await self.wait_idle()
        if self._failure is not None:
            raise self._failure

    async def start(self, tp: TopicPartition, records: list[Record]) -> None:
        """Decode and plan a batch now (in poll order), then apply it in a task; its slot is released at the end."""
        fresh_from = self._fresh_from.get(tp)
        if fresh_from is None:
            high = self.consumer.highwater(tp)
            fresh_from = high if high is not None else records[-1].offset + 1
            if high is not None:
                self._fresh_from[tp] = high
        decisions: list[DecisionsRecord] = []
        fresh: set[str] = set()
        for record in records:
            decoded = await self._decode(record)
            if decoded is None:
                continue
            EVENTS_CONSUMED.labels(component=COMPONENT, topic=tp.topic, type=decoded.type).inc()
            if self.pool_filter is None or decoded.pool in self.pool_filter:
                decisions.append(decoded)
                if record.offset >= fresh_from:
                    fresh.add(str(getattr(decoded, "decision_id", "")))
        actions = plan(decisions, done=_Planned(self._applied, self._in_flight_ids))
        ids = [action.decision.decision_id for action in actions]
        self._in_flight_ids.update(ids)
        batch = _Batch(records[-1].offset + 1, self._generation.get(tp, 0))
        self._batches.setdefault(tp, deque()).append(batch)
        loop = asyncio.get_running_loop()
        chained: list[tuple[list[Action], asyncio.Future[None] | None, asyncio.Future[None]]] = []
        for lane in lanes(actions):
            key = pod_key(lane[0])
            finished: asyncio.Future[None] = loop.create_future()
            chained.append((lane, self._pod_tail.get(key), finished))
            self._pod_tail[key] = finished
        self._idle.clear()
        task = asyncio.create_task(
            self._apply(tp, batch, chained, ids, fresh), name=f"binder-batch-{tp.partition}"
        )
        self._in_flight.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._batch_slots.release()
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()
        if not self._in_flight:
            self._idle.set()

    async def _apply(
        self,
        tp: TopicPartition,
        batch: _Batch,
        chained: list[tuple[list[Action], asyncio.Future[None] | None, asyncio.Future[None]]],
        ids: list[str],
        fresh: set[str],
    ) -> None:
        deliveries: list[asyncio.Future[Any]] = []
        try:
            await asyncio.gather(
                *(self._run_lane(lane, after, done, deliveries, fresh) for lane, after, done in chained)
            )
            if deliveries:
                await asyncio.gather(*deliveries)
        finally:
            for _, _, finished in chained:
                if not finished.done():
                    finished.set_result(None)
            self._in_flight_ids.difference_update(ids)
        for decision_id in ids:
            self._remember(decision_id)
        batch.done = True
        queue = self._batches.get(tp)
        if batch.generation != self._generation.get(tp, 0) or queue is None:
            return
        while queue and queue[0].done:
            self._done[tp] = queue.popleft().end
        high = self.consumer.highwater(tp)
        if high is not None and tp in self._done:
            CONSUMER_LAG.labels(component=COMPONENT, topic=tp.topic, partition=str(tp.partition)).set(
                max(0, high - self._done[tp])
            )
        await self._commit_soon()

    async def _commit_soon(self) -> None:
        """Commit what is done; a commit asked for while one runs is made right after it (covering both)."""
        self._commit_wanted = True
        if self._commit_lock.locked():
            return
        while self._commit_wanted:
            self._commit_wanted = False
            await self._commit_quietly()

    async def commit_done(self, only: Collection[TopicPartition] | None = None) -> None:
        """Commit the offsets of finished batches (optionally only for ``only``)."""
        async with self._commit_lock:
            assigned = self.consumer.assignment()
            offsets = {
                tp: off for tp, off in self._done.items() if tp in assigned and (only is None or tp in only)
            }
            if not offsets:
                return
            await self.consumer.commit(offsets)
            for tp, off in offsets.items():
                if self._done.get(tp) == off:
                    del self._done[tp]

    async def _commit_quietly(self, only: Collection[TopicPartition] | None = None) -> None:
        try:
            await self.commit_done(only)
        except (CommitFailedError, KafkaError) as exc:
            log.warning("binder commit failed (the work will be re-delivered and re-checked): %s", exc)

    async def _run_lane(
        self,
        lane: list[Action],
        after: asyncio.Future[None] | None,
        finished: asyncio.Future[None],
        deliveries: list[asyncio.Future[Any]],
        fresh: Collection[str] = frozenset(),
    ) -> None:
        """One pod's actions, in order, once the pod's previous lane (an earlier batch) is finished."""
        try:
            if after is not None:
                await after
            async with self._slots:
                for action in lane:
                    outcome = await self.applier.apply(action, fresh=action.decision.decision_id in fresh)
                    if outcome is not None:
                        deliveries.extend(await self._publish(outcome))
        finally:
            if not finished.done():
                finished.set_result(None)
            key = pod_key(lane[0])
            if self._pod_tail.get(key) is finished:
                del self._pod_tail[key]

    async def _publish(self, outcome: Outcome) -> list[asyncio.Future[Any]]:
        raw = dumps(outcome)
        futures = []
        urgent = not is_feedback(outcome)
        for topic in (self.topics.bind_results, self.topics.cluster_events):
            futures.append(await send_keyed(self.producer, topic, outcome.pool, raw, urgent=urgent))
            EVENTS_PUBLISHED.labels(component=COMPONENT, topic=topic, type=outcome.type).inc()
        BINDER_OUTCOMES.labels(kind=outcome.type).inc()
        return futures

    async def _decode(self, record: Record) -> DecisionsRecord | None:
        try:
            return loads_decisions_record(record.value)
        except MalformedEvent as exc:
            letter = DeadLetter.from_raw(
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                key=record.key,
                value=record.value,
                reason=f"binder: not a decisions record: {exc}",
                ts=record.timestamp / 1000,
            )
            pool = record.key[:MAX_NAME].decode(errors="replace") if record.key else "default"
            await (await send_keyed(self.producer, self.topics.dead_letter, pool, dumps(letter), urgent=True))
            DEAD_LETTERS.labels(component=COMPONENT, topic=record.topic).inc()
            return None

    def _remember(self, decision_id: str) -> None:
        self._applied[decision_id] = None
        while len(self._applied) > _APPLIED_MEMORY:
            self._applied.popitem(last=False)


class _CommitOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
    """Finishes and commits the work of partitions being taken away, before any member gets them."""

    def __init__(self, group_id: str) -> None:
        self.binder: Binder | None = None
        self.group_id = group_id
        self.consumer: AIOKafkaConsumer | None = None

    async def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        if self.binder is not None:
            await self.binder.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        succession.record(self.group_id, member_id(self.consumer))


async def run_binder(
    kafka_settings: KafkaSettings,
    kube_config: client.Configuration,
    pool_filter: Collection[str] | None = None,
    stop_event: asyncio.Event | None = None,
    *,
    topics: TopicNames = DEFAULT_TOPICS,
    group_id: str = DEFAULT_GROUP_ID,
    concurrency: int = 64,
    max_batch: int = 1000,
    max_in_flight: int = 16,
    retry: RetryPolicy = DEFAULT_RETRY,
    health: Health | None = None,
) -> None:
    """Run a binder until ``stop_event`` is set (or the task is cancelled); always closes its clients.

    ``concurrency``: pods applied in parallel; ``max_batch``: records per poll (a batch is committed as a whole,
    and a rebalance waits for the batches in flight); ``max_in_flight``: batches applied at once.
    ``pool_filter``: only decisions of these pools are applied (the others are acknowledged and skipped);
    binders with different filters need different ``group_id``s. Binds are checked for room against a watched
    view of the nodes and their pods (``view.py``).
    """
    stop = stop_event if stop_event is not None else asyncio.Event()
    listener = _CommitOnRevoke(group_id)
    consumer = make_consumer(kafka_settings, topics.decisions, group_id=group_id, listener=listener)
    listener.consumer = consumer
    producer = make_producer(kafka_settings, linger_ms=feedback_linger_ms(kafka_settings))
    api = api_client(kube_config)
    view = RoomView(api)
    watching = asyncio.create_task(view.run(), name="binder-room-view")
    try:
        await producer.start()
        await succession.fence(kafka_settings, group_id)
        await consumer.start()
        if health is not None:
            health.set_condition("kafka", True)
        binder = Binder(
            consumer,
            producer,
            KubeApplier(api, retry, view),
            topics=topics,
            pool_filter=pool_filter,
            concurrency=concurrency,
            max_batch=max_batch,
            max_in_flight=max_in_flight,
            health=health,
        )
        listener.binder = binder
        await binder.run(stop)
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        if health is not None:
            health.set_condition("kafka", False, "stopped")
        await asyncio.shield(_close(consumer, producer, api))


async def _close(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer, api: client.ApiClient) -> None:
    for closer in (consumer.stop, producer.stop, api.close):
        try:
            await closer()
        except Exception as exc:
            log.warning("binder shutdown: %s", exc)
