"""Shared aiokafka plumbing: client factories, pool partitioning, and reading a topic to its end.

Rules that keep one code path correct on both Tansu and real Kafka:

* no idempotent or transactional producer (Tansu fails InitProducerId): at-least-once, consumers dedupe; the
  processor alone writes in transactions, on Apache Kafka only (``streams/exactly_once.py``), and every consumer
  there reads committed records only (``read_committed``), so an aborted batch of decisions is never seen;
* manual commits only (``enable_auto_commit=False``);
* the end of a partition is the high-watermark returned by fetches (``consumer.highwater(tp)``), never
  ``end_offsets()`` / ``seek_to_end()`` / ``auto_offset_reset="latest"`` (wrong on Tansu);
* every producer routes a pool's records with ``partition_for(pool, n)``: Kafka's murmur2 key hash, so a
  keyed record lands on the same partition whichever client (Java, librdkafka, aiokafka) produced it;
* records that must reach the log together (one scheduling cycle's) go as one record batch (``send_unit``):
  a partition appends a batch whole or not at all, on Kafka and on Tansu alike (no transaction needed, so
  consumers need no ``read_committed`` and a killed producer leaves no open transaction behind).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, TypeAlias

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient

from kai_stream.core.events import Model, dumps
from kai_stream.fetchgaps import gap_guarded
from kai_stream.fetchwait import governed
from kai_stream.internals import expedite, kafka_client
from kai_stream.quirks import tansu_workarounds
from kai_stream.settings import KafkaSettings
from kai_stream.topicspecs import partition_for as partition_for

Record: TypeAlias = ConsumerRecord[bytes, bytes]


READ_TO_END_WAIT_MS = 20
"""Fetch wait of a consumer that reads partitions to their end and stops: on Apache Kafka the first fetch of a
partition with nothing past the position is answered only when the wait runs out."""


def make_producer(settings: KafkaSettings, **overrides: Any) -> AIOKafkaProducer:
    """A plain (non-idempotent) producer that waits for all in-sync replicas."""
    kwargs: dict[str, Any] = {
        **settings.client_kwargs(),
        "acks": "all",
        "enable_idempotence": False,
        "linger_ms": 1,
    }
    kwargs.update(overrides)
    return AIOKafkaProducer(**kwargs)


def make_consumer(
    settings: KafkaSettings,
    *topics: str,
    group_id: str | None,
    listener: ConsumerRebalanceListener | None = None,
    **overrides: Any,
) -> AIOKafkaConsumer:
    """A manual-commit consumer that starts from the earliest record when the group has no offset.

    On Tansu (``quirks.py``) its fetch wait starts at ``settings.fetch_max_wait_ms`` (short by default: Tansu never
    answers a fetch early) and grows while Tansu answers it empty behind the log end (``fetchwait.py``); its fetch
    answers are cut at the first offset Tansu has not stored yet, so it never moves past a record it was not given
    (``fetchgaps.py``). On Apache Kafka it is a plain aiokafka consumer reading committed records only, whose fetch
    waits ``settings.fetch_max_wait_kafka_ms`` (Kafka answers early); reads to the end pass a short
    ``fetch_max_wait_ms``.

    With ``topics`` it subscribes (optionally with a rebalance ``listener``); without, assign partitions.
    """
    kwargs: dict[str, Any] = {
        **settings.client_kwargs(),
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "session_timeout_ms": settings.session_timeout_ms,
        "heartbeat_interval_ms": settings.heartbeat_interval_ms,
    }
    tansu = tansu_workarounds(settings)
    kwargs["fetch_max_wait_ms"] = settings.fetch_max_wait_ms if tansu else settings.fetch_max_wait_kafka_ms
    if not tansu:
        kwargs["isolation_level"] = "read_committed"
    kwargs.update(overrides)
    consumer = AIOKafkaConsumer(**kwargs)
    if tansu:
        governed(consumer, kwargs["fetch_max_wait_ms"], settings.fetch_max_wait_limit_ms)
        gap_guarded(consumer, settings.fetch_hole_patience_s)  # outside the governor: it sees the answer uncut
    if topics:
        if listener is None:
            consumer.subscribe(list(topics))
        else:
            consumer.subscribe(list(topics), listener=listener)
    return consumer


def make_admin(settings: KafkaSettings) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(**settings.client_kwargs())


async def send_keyed(
    producer: AIOKafkaProducer, topic: str, pool: str, value: bytes, *, urgent: bool = False
) -> asyncio.Future[Any]:
    """Enqueue ``value`` on the pool's partition of ``topic``; await the returned future for delivery.
    ``urgent``: send it (and what the producer holds for that partition) without waiting out the linger."""
    partitions = await producer.partitions_for(topic)
    if not partitions:
        raise LookupError(f"topic {topic!r} has no partitions (does it exist?)")
    partition = partition_for(pool, len(partitions))
    future: asyncio.Future[Any] = await producer.send(topic, value, key=pool.encode(), partition=partition)
    if urgent:
        expedite(producer, topic, partition)
    return future


UNIT_MAX_BYTES = 64 * 2**20
"""Largest record batch ``send_unit`` builds (and the decisions topic's ``max.message.bytes``): about 90,000
decisions."""


class UnitTooLarge(ValueError):
    """The records do not fit one batch of the producer's ``max_batch_size``."""


async def send_unit(
    producer: AIOKafkaProducer, topic: str, partition: int, key: bytes, values: Sequence[bytes]
) -> asyncio.Future[Any]:
    """Enqueue ``values`` (in order, each keyed ``key``) as ONE record batch on ``topic``/``partition``: the broker
    appends all of them or none, whenever the producer dies. Await the returned future for delivery.
    ``UnitTooLarge`` when they do not fit the producer's ``max_batch_size`` (nothing is sent then)."""
    batch = producer.create_batch()
    for value in values:
        if batch.append(key=key, value=value, timestamp=None) is None:
            raise UnitTooLarge(f"{len(values)} records do not fit one batch on {topic}/{partition}")
    batch.close()
    future: asyncio.Future[Any] = await producer.send_batch(batch, topic, partition=partition)
    return future


async def publish(producer: AIOKafkaProducer, topic: str, event: Model, *, pool: str) -> None:
    """Send one event (canonical bytes) to the pool's partition and wait until the broker has it."""
    await (await send_keyed(producer, topic, pool, dumps(event)))


async def _caught_up(consumer: AIOKafkaConsumer, partitions: Iterable[TopicPartition]) -> bool:
    for tp in partitions:
        high = consumer.highwater(tp)
        if high is None or await consumer.position(tp) < high:
            return False
    return True


async def iter_to_end(
    consumer: AIOKafkaConsumer,
    *,
    timeout_s: float = 30.0,
    poll_ms: int = 200,
    max_records: int | None = None,
) -> AsyncIterator[list[Record]]:
    """Yield batches from the consumer's assigned partitions until each is at its fetch high-watermark.

    The end is known only once a fetch has answered for every partition; raises ``TimeoutError`` if that
    has not happened within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        batches = await consumer.getmany(timeout_ms=poll_ms, max_records=max_records)
        records = [record for tp in sorted(batches) for record in batches[tp]]
        if records:
            yield records
        assigned = consumer.assignment()
        if assigned and await _caught_up(consumer, assigned):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"did not reach the end of {sorted(assigned)} within {timeout_s}s")


async def read_to_end(consumer: AIOKafkaConsumer, *, timeout_s: float = 30.0) -> list[Record]:
    """Every record from the current positions up to the high-watermark, partitions in order."""
    out: list[Record] = []
    async for batch in iter_to_end(consumer, timeout_s=timeout_s):
        out.extend(batch)
    return out


async def topic_partitions(consumer: AIOKafkaConsumer, topic: str) -> list[int]:
    """The partitions of ``topic`` from a fresh all-topics metadata request (empty if it does not exist).

    ``consumer.topics()`` alone does not do: it leaves the consumer's own metadata as its subscription had it,
    which on Apache Kafka holds no topic for an unsubscribed consumer (Tansu answers every topic)."""
    cluster: Any = await kafka_client(consumer).fetch_all_metadata()
    return sorted(cluster.partitions_for_topic(topic) or ())


async def assign_from_start(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    """Assign every partition of ``topic`` to a started group-less consumer, at the beginning; LookupError if the
    topic does not exist."""
    partitions = await topic_partitions(consumer, topic)
    if not partitions:
        raise LookupError(f"topic {topic!r} does not exist")
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    return tps


async def start_consumer(consumer: AIOKafkaConsumer) -> None:
    """Start ``consumer``; when it cannot (no broker), close it before the error goes up."""
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()
        raise


async def read_topic(settings: KafkaSettings, topic: str, *, timeout_s: float = 30.0) -> list[Record]:
    """Every record currently in ``topic``, read without a consumer group (all partitions, from the start)."""
    consumer = make_consumer(settings, group_id=None, fetch_max_wait_ms=READ_TO_END_WAIT_MS)
    await start_consumer(consumer)
    try:
        await assign_from_start(consumer, topic)
        return await read_to_end(consumer, timeout_s=timeout_s)
    finally:
        await consumer.stop()
