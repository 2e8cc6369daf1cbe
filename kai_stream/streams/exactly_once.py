"""The processor's consume → decide → publish loop on Apache Kafka: bulk reads and one transaction per batch.

On Tansu the faust agent (``agents.py``) delivers records one message at a time and the processor is
at-least-once (re-deliveries are skipped by offset after a rebuild, a kill can leave part of a batch's decisions
in the log). On Apache Kafka this loop replaces that agent:

* records come off an aiokafka consumer of the processor's group in bulk (``getmany``, up to ``batch_max`` per
  call), straight into ``SchedulerRuntime.submit`` (no per-message faust event, ack or stream); the partitions of
  one ``getmany`` are processed concurrently (their rebuilds' reads overlap), each in its own task;
* each partition's batch runs in one Kafka transaction of that partition's producer
  (``transactional.id`` = ``<app id>-<partition>``): its decisions and dead letters, the engine snapshot when one
  is due (``snapshots.py``) and the consumed offsets (``send_offsets_to_transaction``) become visible together or
  not at all. Every kai-stream consumer on Kafka reads committed records only (``kafka.make_consumer``), so a
  processor killed mid-batch leaves nothing of that batch behind: exactly once;
* a batch that publishes nothing (most are: a bound pod's feedback, a tick that changes no decision) commits no
  transaction: its offsets go with the next batch's transaction, or in one of their own once they waited
  ``commit_interval_s``. An offsets-only transaction costs five round trips
  and transaction markers, and the next transaction of the partition, begun before those markers were written,
  was refused (``CONCURRENT_TRANSACTIONS``) and retried after aiokafka's 20-100 ms back-off: at a low rate the
  records of the next pod waited behind them. A restart re-delivers such records; the rebuild has folded them
  already (it reads the log to its end), so they are skipped by offset;
* a partition's producer is started (``InitProducerId``) before its state is rebuilt, which fences the previous
  owner of the partition and aborts its open transaction, so the rebuild reads a stable log;
* a rebuild starts from the partition's last snapshot when there is one (``SchedulerRuntime.rebuild``).

Snapshots are taken at most every ``snapshot_interval_s`` per partition (the first with the first batch after a
rebuild), and only after a batch that left no
pool waiting (deferred or awaiting a recorded decision's input), so the snapshot's engine has decided on
everything it folded and any later decision's input offset lies past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.structs import RecordMetadata

from kai_stream.core.events import Model, dumps
from kai_stream.hoptrace import HopTrace
from kai_stream.kafka import make_consumer, make_producer, start_consumer
from kai_stream.settings import KafkaSettings
from kai_stream.streams import snapshots
from kai_stream.streams.runtime import InRecord, SchedulerRuntime
from kai_stream.topics import TopicNames

log = logging.getLogger(__name__)

FETCH_BYTES_PER_PARTITION = 16 * 2**20
"""How much of a partition one fetch may bring: a backlog of up to ``batch_max`` records (a pending pod's record is
~700 bytes) arrives as one batch and is decided in one cycle over the cluster; aiokafka's 1 MiB holds ~1,400 such
records, so a larger backlog came in several batches, each with its own cycle."""


@dataclass
class _Transaction:
    """The transaction a running partition batch publishes in, and how many records it sent into it."""

    producer: AIOKafkaProducer
    sent: int = 0


@dataclass
class _Fetched:
    """Records of one partition taken off the consumer and not processed yet, and when the first came."""

    at: float
    records: list[Any] = field(default_factory=list)


TRANSACTION_RETRY_BACKOFF_MS = 10
"""The transactional producers' retry back-off. A transaction's request that comes before the markers of the
partition's previous transaction are written is refused (``CONCURRENT_TRANSACTIONS``) and retried after it;
aiokafka's default, 100 ms, then went straight into a decision's latency (markers take milliseconds)."""

_current: contextvars.ContextVar[_Transaction | None] = contextvars.ContextVar("transaction", default=None)
"""The transaction of the running partition batch (batches of partitions run at once)."""


class TransactionalLoop(ConsumerRebalanceListener):  # type: ignore[misc]
    """Consumes cluster-events for ``group_id`` and publishes each partition's batch in one transaction."""

    def __init__(
        self,
        runtime: SchedulerRuntime,
        kafka: KafkaSettings,
        names: TopicNames,
        *,
        group_id: str,
        batch_max: int,
        snapshot_interval_s: float,
        transaction_timeout_ms: int = 10_000,
        commit_interval_s: float = 0.5,
        instance_id: str | None = None,
        on_batch: Callable[[bool], None] = lambda ok: None,
    ) -> None:
        self.runtime = runtime
        self.kafka = kafka
        self.names = names
        self.group_id = group_id
        self.batch_max = batch_max
        self.snapshot_interval_s = snapshot_interval_s
        self.transaction_timeout_ms = transaction_timeout_ms
        self.commit_interval_s = commit_interval_s
        self.instance_id = instance_id
        self.on_batch = on_batch
        self.state_topic = snapshots.topic_name(group_id)
        self.consumer: AIOKafkaConsumer | None = None
        self._producers: dict[int, AIOKafkaProducer] = {}
        self._busy = asyncio.Lock()
        self._snapshot_at: dict[int, float] = {}
        self._fetched: dict[TopicPartition, _Fetched] = {}
        self._arrived = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._uncommitted: dict[int, tuple[int, float]] = {}
        """Per partition: the offset past its last batch that published nothing, and since when it waits."""
        self._hops = HopTrace("processor")
        runtime.send = self.send
        runtime.send_unit = None  # the batch's transaction makes a cycle atomic; another producer would leave it
        if snapshot_interval_s > 0:
            runtime.state_topic = self.state_topic

    async def send(self, topic: str, partition: int, key: bytes, record: Model) -> Awaitable[RecordMetadata]:
        """``SchedulerRuntime``'s send: into the transaction of the batch being processed."""
        transaction = _current.get()
        assert transaction is not None, "send outside a batch"
        transaction.sent += 1
        future: Awaitable[RecordMetadata] = await transaction.producer.send(
            topic, dumps(record), key=key, partition=partition
        )
        return future

    async def run(self) -> None:
        """Consume until cancelled; a failing batch drops the state and restarts the consumer (re-delivered)."""
        if self.snapshot_interval_s > 0:
            await snapshots.ensure_topic(self.kafka, self.state_topic, self.runtime.partitions)
        while True:
            try:
                await self._consume()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("processor: batch failed, rebuilding from the log: %r", exc)
                self.on_batch(False)
                await asyncio.sleep(1.0)

    async def _consume(self) -> None:
        consumer = make_consumer(
            self.kafka,
            self.names.cluster_events,
            group_id=self.group_id,
            listener=self,
            group_instance_id=self.instance_id,
            max_partition_fetch_bytes=FETCH_BYTES_PER_PARTITION,
        )
        await start_consumer(consumer)
        self.consumer = consumer
        reader = asyncio.create_task(self._read(consumer), name="processor-reader")
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), 0.1)
                if reader.done():
                    reader.result()
                    raise RuntimeError("the processor's reader stopped")
                if self._commit_due():
                    async with self._busy:
                        await self._commit_waiting()
                if not self._arrived.is_set():
                    continue
                async with self._busy:
                    batches, self._fetched = self._fetched, {}
                    self._arrived.clear()
                    self._drained.set()
                    taken = time.time()
                    assigned = consumer.assignment()
                    done = await asyncio.gather(
                        *(self._batch(tp, fetched, taken) for tp, fetched in sorted(batches.items())
                          if tp in assigned),
                        return_exceptions=True,
                    )
                failed = [result for result in done if isinstance(result, BaseException)]
                if failed:
                    raise failed[0]
                self.on_batch(True)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            self._fetched.clear()
            self._arrived.clear()
            self.consumer = None
            await self._close(sorted(self._producers))
            self.runtime.forget(sorted(self.runtime.engines))
            await consumer.stop()

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        """Take records off the consumer as soon as they arrive, while a batch is processed, into ``_fetched``
        (at most about ``batch_max`` records wait there). aiokafka fetches a partition again only once its records
        were taken, and keeps one fetch per broker in flight: records left in the consumer for 100 ms while a
        batch was processed went unfetched while a fetch for the other partitions waited out its 500 ms."""
        while True:
            await self._drained.wait()
            batches = await consumer.getmany(timeout_ms=100, max_records=self.batch_max)
            if not batches:
                continue
            now = time.time()
            for tp, records in batches.items():
                self._fetched.setdefault(tp, _Fetched(now)).records.extend(records)
            self._arrived.set()
            if sum(len(f.records) for f in self._fetched.values()) >= self.batch_max:
                self._drained.clear()

    def backlog(self, partition: int, last_offset: int) -> int:
        """Records of the partition known (from fetch high-watermarks) to follow ``last_offset``."""
        high = self.consumer.highwater(TopicPartition(self.names.cluster_events, partition)) if self.consumer else None
        return max(0, (high or 0) - last_offset - 1)

    async def _producer(self, partition: int) -> AIOKafkaProducer:
        producer = self._producers.get(partition)
        if producer is None:
            producer = make_producer(
                self.kafka,
                enable_idempotence=True,
                transactional_id=f"{self.group_id}-{partition}",
                transaction_timeout_ms=self.transaction_timeout_ms,
                max_request_size=snapshots.MAX_SNAPSHOT_BYTES,
                linger_ms=0,
                retry_backoff_ms=TRANSACTION_RETRY_BACKOFF_MS,
            )
            await producer.start()  # InitProducerId: the partition's previous owner is fenced, its open batch aborted
            self._producers[partition] = producer
        return producer

    async def _batch(self, tp: TopicPartition, fetched: _Fetched, taken: float) -> None:
        partition, records = tp.partition, fetched.records
        producer = await self._producer(partition)
        batch = [InRecord(partition, r.offset, r.key, r.value, r.timestamp) for r in records]
        transaction = _Transaction(producer)
        token = _current.set(transaction)
        try:
            async with producer.transaction():
                _, deliveries = await self.runtime.submit(batch, self.backlog)
                cycled = time.time()
                delivered = await asyncio.gather(*deliveries)
                for meta in delivered:
                    if meta.topic == self.names.decisions and meta.partition == partition:
                        self.runtime.decisions_end[partition] = max(
                            self.runtime.decisions_end.get(partition, 0), meta.offset + 1
                        )
                snapshot = await self._maybe_snapshot(producer, partition)
                if transaction.sent or snapshot:
                    await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, self.group_id)
                    self._uncommitted.pop(partition, None)
                else:  # an empty transaction: aiokafka ends it without asking the broker
                    since = self._uncommitted.get(partition, (0, time.monotonic()))[1]
                    self._uncommitted[partition] = (records[-1].offset + 1, since)
            self._hops.batch(partition, records[0].offset, records[-1].offset,
                             fetched=fetched.at, taken=taken, cycled=cycled, committed=time.time())
        except BaseException:
            self.runtime.forget([partition])  # the engine may hold decisions the aborted transaction dropped
            await self._close([partition])
            raise
        finally:
            _current.reset(token)

    def _commit_due(self) -> bool:
        now = time.monotonic()
        return any(now - since >= self.commit_interval_s for _, since in self._uncommitted.values())

    async def _commit_waiting(self, only: list[int] | None = None) -> None:
        """Commit the offsets of batches that published nothing, each partition's in a transaction of its own:
        those waiting ``commit_interval_s``, or (``only``) all of these partitions. The caller holds ``_busy``."""
        now = time.monotonic()
        for partition, (end, since) in sorted(self._uncommitted.items()):
            if (only is None and now - since < self.commit_interval_s) or (only is not None and partition not in only):
                continue
            producer = self._producers.get(partition)
            del self._uncommitted[partition]
            if producer is None:
                continue
            tp = TopicPartition(self.names.cluster_events, partition)
            try:
                async with producer.transaction():
                    await producer.send_offsets_to_transaction({tp: end}, self.group_id)
            except BaseException:
                self.runtime.forget([partition])
                await self._close([partition])
                raise

    async def _maybe_snapshot(self, producer: AIOKafkaProducer, partition: int) -> bool:
        """Send the partition's engine snapshot into the transaction when one is due; whether it was."""
        if self.snapshot_interval_s <= 0:
            return False
        engine = self.runtime.engines.get(partition)
        now = time.monotonic()
        if (
            engine is None
            or engine.awaiting
            or self.runtime.deferred(partition)
            or now - self._snapshot_at.get(partition, -self.snapshot_interval_s) < self.snapshot_interval_s
        ):
            return False
        snapshot = snapshots.Snapshot(engine, self.runtime.decisions_end.get(partition, 0))
        value = snapshots.encode(snapshot)
        await producer.send(self.state_topic, value, key=snapshots.key(partition), partition=partition)
        self._snapshot_at[partition] = now
        return True

    async def _close(self, partitions: list[int]) -> None:
        for partition in partitions:
            producer = self._producers.pop(partition, None)
            self._snapshot_at.pop(partition, None)
            self._uncommitted.pop(partition, None)
            if producer is not None:
                await producer.stop()

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """After the batch in flight: commit what waits of the revoked partitions' offsets, drop their state and
        producers (their next owner fences)."""
        async with self._busy:
            gone = sorted(tp.partition for tp in revoked if tp.topic == self.names.cluster_events)
            try:
                await self._commit_waiting(only=gone)
            except Exception as exc:  # the next owner re-reads them, and its rebuild has folded them already
                log.warning("processor: committing the revoked partitions' offsets failed: %r", exc)
            self.runtime.forget(gone)
            await self._close(gone)
            for tp in revoked:
                self._fetched.pop(tp, None)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Nothing to do before a partition's first batch, which rebuilds its state."""
