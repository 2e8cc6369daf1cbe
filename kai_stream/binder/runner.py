"""The binder's I/O loop: consume the decisions topic, apply the planned actions, publish outcomes, commit.

At-least-once and idempotent: a partition's offset is committed (``{tp: last.offset + 1}``) only after every
action of the batch went through the API and its outcome was acknowledged by the broker, so a crash
re-delivers unfinished work; applying a decision twice is harmless (``kube.py`` checks the pod first and
outcome bytes depend only on the decision). On a rebalance the finished work is committed before the
partitions go. Undecodable records go to the dead-letter topic with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Collection
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError
from kubernetes_asyncio import client

from kai_stream.binder.kube import DEFAULT_RETRY, KubeApplier, RetryPolicy
from kai_stream.binder.plan import Action, lanes, plan
from kai_stream.core.events import (
    DeadLetter,
    DecisionsRecord,
    MalformedEvent,
    Outcome,
    dumps,
    loads_decisions_record,
)
from kai_stream.kafka import Record, make_consumer, make_producer, send_keyed
from kai_stream.observability import (
    BINDER_OUTCOMES,
    CONSUMER_LAG,
    DEAD_LETTERS,
    EVENTS_CONSUMED,
    EVENTS_PUBLISHED,
    Health,
)
from kai_stream.settings import KafkaSettings
from kai_stream.topics import DEFAULT_TOPICS, TopicNames

log = logging.getLogger(__name__)

COMPONENT = "binder"
DEFAULT_GROUP_ID = "kai-stream-binder"
_APPLIED_MEMORY = 100_000
_REVOKE_WAIT_S = 30.0


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
        self._idle = asyncio.Event()
        self._idle.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Process batches until ``stop`` is set; commits finished work on the way out."""
        try:
            while not stop.is_set():
                batches = await self.consumer.getmany(timeout_ms=100, max_records=self.max_batch)
                if self.health is not None:
                    self.health.beat()
                if not batches:
                    continue
                self._idle.clear()
                try:
                    await asyncio.gather(*(self.process(tp, records) for tp, records in sorted(batches.items())))
                    await self._commit_quietly()
                finally:
                    self._idle.set()
        finally:
            await asyncio.shield(self._commit_quietly())

    async def on_revoked(self, revoked: Collection[TopicPartition]) -> None:
        """Before partitions move: let the batch in flight finish, commit it, forget what was not committed."""
        try:
            await asyncio.wait_for(self._idle.wait(), _REVOKE_WAIT_S)
        except TimeoutError:
            log.warning("binder: batch still running at rebalance; its work will be re-delivered and re-checked")
        await self._commit_quietly(set(revoked))
        for tp in revoked:
            self._done.pop(tp, None)

    async def process(self, tp: TopicPartition, records: list[Record]) -> None:
        """Apply one partition's batch and publish its outcomes; mark the batch done (not yet committed)."""
        decisions: list[DecisionsRecord] = []
        for record in records:
            decoded = await self._decode(record)
            if decoded is None:
                continue
            EVENTS_CONSUMED.labels(component=COMPONENT, topic=tp.topic, type=decoded.type).inc()
            if self.pool_filter is None or decoded.pool in self.pool_filter:
                decisions.append(decoded)
        actions = plan(decisions, done=self._applied)
        deliveries: list[asyncio.Future[Any]] = []
        await asyncio.gather(*(self._run_lane(lane, deliveries) for lane in lanes(actions)))
        if deliveries:
            await asyncio.gather(*deliveries)
        for action in actions:
            self._remember(action.decision.decision_id)
        self._done[tp] = records[-1].offset + 1
        high = self.consumer.highwater(tp)
        if high is not None:
            CONSUMER_LAG.labels(component=COMPONENT, topic=tp.topic, partition=str(tp.partition)).set(
                max(0, high - self._done[tp])
            )

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

    async def _run_lane(self, lane: list[Action], deliveries: list[asyncio.Future[Any]]) -> None:
        async with self._slots:
            for action in lane:
                outcome = await self.applier.apply(action)
                if outcome is not None:
                    deliveries.extend(await self._publish(outcome))

    async def _publish(self, outcome: Outcome) -> list[asyncio.Future[Any]]:
        raw = dumps(outcome)
        futures = []
        for topic in (self.topics.bind_results, self.topics.cluster_events):
            futures.append(await send_keyed(self.producer, topic, outcome.pool, raw))
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
            pool = record.key.decode(errors="replace") if record.key else "default"
            await (await send_keyed(self.producer, self.topics.dead_letter, pool, dumps(letter)))
            DEAD_LETTERS.labels(component=COMPONENT, topic=record.topic).inc()
            return None

    def _remember(self, decision_id: str) -> None:
        self._applied[decision_id] = None
        while len(self._applied) > _APPLIED_MEMORY:
            self._applied.popitem(last=False)


class _CommitOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
    """Finishes and commits the work of partitions being taken away, before any member gets them."""

    def __init__(self) -> None:
        self.binder: Binder | None = None

    async def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        if self.binder is not None:
            await self.binder.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        return None


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
    retry: RetryPolicy = DEFAULT_RETRY,
    health: Health | None = None,
) -> None:
    """Run a binder until ``stop_event`` is set (or the task is cancelled); always closes its clients.

    ``concurrency``: pods applied in parallel; ``max_batch``: records per poll (a batch is committed as a whole,
    and a rebalance waits for the batch in flight).
    ``pool_filter``: only decisions of these pools are applied (the others are acknowledged and skipped);
    binders with different filters need different ``group_id``s.
    """
    stop = stop_event if stop_event is not None else asyncio.Event()
    listener = _CommitOnRevoke()
    consumer = make_consumer(kafka_settings, topics.decisions, group_id=group_id, listener=listener)
    producer = make_producer(kafka_settings)
    api = client.ApiClient(configuration=kube_config)
    try:
        await producer.start()
        await consumer.start()
        if health is not None:
            health.set_condition("kafka", True)
        binder = Binder(
            consumer,
            producer,
            KubeApplier(api, retry),
            topics=topics,
            pool_filter=pool_filter,
            concurrency=concurrency,
            max_batch=max_batch,
            health=health,
        )
        listener.binder = binder
        await binder.run(stop)
    finally:
        if health is not None:
            health.set_condition("kafka", False, "stopped")
        await asyncio.shield(_close(consumer, producer, api))


async def _close(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer, api: client.ApiClient) -> None:
    for closer in (consumer.stop, producer.stop, api.close):
        try:
            await closer()
        except Exception as exc:
            log.warning("binder shutdown: %s", exc)
