"""The processor's consume → decide → publish loop on Apache Kafka: bulk reads and one transaction per batch.

On Tansu the faust agent (``agents.py``) delivers records one message at a time and the processor is
at-least-once (re-deliveries are skipped by offset after a rebuild, a kill can leave part of a batch's decisions
in the log). On Apache Kafka this loop replaces that agent:

* records come off an aiokafka consumer of the processor's group in bulk (``getmany``, up to ``batch_max`` per
  call), straight into ``SchedulerRuntime.submit`` (no per-message faust event, ack or stream); the partitions of
  one ``getmany`` are processed concurrently (their rebuilds' reads overlap), each in its own task;
* each partition's batch runs in one Kafka transaction of that partition's producer
  (``transactional.id`` = ``<app id>-<partition>``): its decisions and dead letters and the engine snapshot when
  one is due (``snapshots.py``) become visible together or not at all. A cycle's decisions are appended to record
  batches of up to ``UNIT_BATCH_BYTES`` (``send_unit``), not handed to the producer one by one.
  Every kai-stream consumer on Kafka reads
  committed records only (``kafka.make_consumer``), so a processor killed mid-batch leaves nothing of that batch
  behind: exactly once. A batch that publishes nothing ends an empty transaction (aiokafka does not ask the
  broker);
* the consumed offsets are not part of the transactions: they only say where delivery resumes. What the engine
  has folded and decided is what the logs hold, whatever was committed: a rebuild reads cluster-events to its end
  and every committed decision (``runtime.rebuild``), and the records re-delivered after it are skipped by offset.
  So the group's offsets are committed on their own (``consumer.commit``, fenced by the group generation) at most
  every ``commit_interval_s`` and when partitions are revoked. In the transactions they cost two more round trips
  per decision (AddOffsetsToTxn, TxnOffsetCommit), and every batch that published nothing needed a transaction of
  its own, whose markers the partition's next transaction then waited for (``CONCURRENT_TRANSACTIONS``, retried
  after a back-off): at a low rate the next pod's records queued behind them;
* a partition's producer is started (``InitProducerId``) before its state is rebuilt, which fences the previous
  owner of the partition and aborts its open transaction, so the rebuild reads a stable log;
* a rebuild starts from the partition's last snapshot when there is one (``SchedulerRuntime.rebuild``);
* a batch whose transaction stayed open past ``transaction_timeout_ms`` (a cycle over a large backlog, or other
  partitions' cycles, holding the event loop while it was open) is aborted by the broker and its producer fenced:
  the batch fails and is rebuilt and decided again. That batch would take as long again, be fenced again, and the
  processor would decide nothing for as long as the backlog lasts; so the loop's producers are then made with a
  timeout of at least twice what the failed transaction lasted (``_outlasted``, up to the broker's default
  maximum).

Snapshots are taken at most every ``snapshot_interval_s`` per partition (the first with the first batch after a
rebuild), after the batch's transaction committed, encoded in a forked child and written by the partition's next
transaction (``snapshots.encode_aside``), and only after a batch that left no
pool waiting (deferred or awaiting a recorded decision's input), so the snapshot's engine has decided on
everything it folded and any later decision's input offset lies past it.

The heap is settled (``SchedulerRuntime.settle_heap``: a full collection, then a freeze) between batches, when
no record waits, rather than inside a batch before its decisions are sent; while records keep arriving it waits
up to ``SETTLE_LATE`` times its interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.structs import RecordMetadata

from kai_stream.core.events import Model, dumps
from kai_stream.hoptrace import HopTrace
from kai_stream.kafka import UnitTooLarge, make_consumer, make_producer, start_consumer
from kai_stream.settings import KafkaSettings
from kai_stream.streams import snapshots, startup
from kai_stream.streams.runtime import InRecord, SchedulerRuntime
from kai_stream.topics import TopicNames

log = logging.getLogger(__name__)

FETCH_BYTES_PER_PARTITION = 16 * 2**20
"""How much of a partition one fetch may bring: a backlog of up to ``batch_max`` records (a pending pod's record is
~700 bytes) arrives as one batch and is decided in one cycle over the cluster; aiokafka's 1 MiB holds ~1,400 such
records, so a larger backlog came in several batches, each with its own cycle."""


@dataclass
class _Fetched:
    """Records of one partition taken off the consumer and not processed yet, and when the first came."""

    at: float
    records: list[Any] = field(default_factory=list)


TRANSACTION_RETRY_BACKOFF_MS = 10
"""The transactional producers' retry back-off. A transaction's request that comes before the markers of the
partition's previous transaction are written is refused (``CONCURRENT_TRANSACTIONS``) and retried after it;
aiokafka's default, 100 ms, went straight into a decision's latency (markers take milliseconds)."""
SETTLE_LATE = 3.0
MAX_TRANSACTION_TIMEOUT_MS = 900_000
"""The broker's default ``transaction.max.timeout.ms``: a producer asking for more is refused at InitProducerId."""

UNIT_BATCH_BYTES = 512 * 1024
"""The record batches a cycle's decisions fill (``send_unit``; the producer's ``max_batch_size``): a burst's thousands
of decisions go in a few batches, each under the broker's default ``message.max.bytes`` (1 MiB), which the dead-letter
topic keeps."""


def _unit_delivery(
    sent: list[asyncio.Future[RecordMetadata]], count: int, last_count: int
) -> asyncio.Future[RecordMetadata]:
    """One delivery for a unit sent as several record batches: fails if any failed, else the last batch's metadata
    with the offset of the unit's first record."""
    unit: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()

    def settle(done: asyncio.Future[list[RecordMetadata]]) -> None:
        if unit.done():
            return
        if done.cancelled():
            unit.cancel()
        elif (error := done.exception()) is not None:
            unit.set_exception(error)
        else:
            last = done.result()[-1]
            unit.set_result(last._replace(offset=last.offset + last_count - count))

    asyncio.gather(*sent).add_done_callback(settle)
    return unit


_current: contextvars.ContextVar[AIOKafkaProducer | None] = contextvars.ContextVar("transaction", default=None)
"""The producer whose transaction the running partition batch publishes in (batches of partitions run at once)."""


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
        self._encoding: dict[int, asyncio.Future[bytes]] = {}
        """Per partition: its snapshot being encoded (or encoded and not written yet)."""
        self._fetched: dict[TopicPartition, _Fetched] = {}
        self._arrived = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._uncommitted: dict[TopicPartition, int] = {}
        """The offsets past the batches processed since the last commit."""
        self._committed_at = time.monotonic()
        self._hops = HopTrace("processor")
        runtime.send = self.send
        runtime.send_unit = self.send_unit
        runtime.settle_in_submit = False
        if snapshot_interval_s > 0:
            runtime.state_topic = self.state_topic

    async def send(self, topic: str, partition: int, key: bytes, record: Model) -> Awaitable[RecordMetadata]:
        """``SchedulerRuntime``'s send: into the transaction of the batch being processed."""
        producer = _current.get()
        assert producer is not None, "send outside a batch"
        future: Awaitable[RecordMetadata] = await producer.send(topic, dumps(record), key=key, partition=partition)
        return future

    async def send_unit(
        self, topic: str, partition: int, key: bytes, values: Sequence[bytes]
    ) -> Awaitable[RecordMetadata]:
        """``SchedulerRuntime``'s send_unit: a cycle's records into the transaction of the batch being processed,
        as record batches filled one after the other (far cheaper than a send per record). The transaction, not
        one record batch, makes them atomic, so they may take several. The delivery is the last batch's, with the
        offset of the unit's first record (its last batch's end less the unit's size)."""
        producer = _current.get()
        assert producer is not None, "send outside a batch"
        sent: list[asyncio.Future[RecordMetadata]] = []
        batch = producer.create_batch()
        for value in values:
            if batch.append(key=key, value=value, timestamp=None) is None:
                batch.close()
                sent.append(await producer.send_batch(batch, topic, partition=partition))
                batch = producer.create_batch()
                if batch.append(key=key, value=value, timestamp=None) is None:
                    raise UnitTooLarge(f"a record of {len(value)} bytes does not fit an empty batch on {topic}")
        last_count = batch.record_count()
        batch.close()
        sent.append(await producer.send_batch(batch, topic, partition=partition))
        return _unit_delivery(sent, len(values), last_count)

    async def run(self) -> None:
        """Consume until cancelled; a failing batch drops the state and restarts the consumer (re-delivered)."""
        startup.reached("app started")
        if self.snapshot_interval_s > 0:
            await snapshots.ensure_topic(self.kafka, self.state_topic, self.runtime.partitions)
            startup.reached("state topic ensured")
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
        startup.reached("consumer started")
        self.consumer = consumer
        reader = asyncio.create_task(self._read(consumer), name="processor-reader")
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), 0.1)
                if reader.done():
                    reader.result()
                    raise RuntimeError("the processor's reader stopped")
                if self._uncommitted and time.monotonic() - self._committed_at >= self.commit_interval_s:
                    async with self._busy:
                        await self._commit_offsets(consumer)
                if not self._arrived.is_set() and any(encoding.done() for encoding in self._encoding.values()):
                    async with self._busy:
                        await self._write_snapshots()
                if self.runtime.settle_due(SETTLE_LATE if self._arrived.is_set() else 1.0):
                    self.runtime.settle_heap()
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
            startup.reached("first records fetched")
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
                max_batch_size=UNIT_BATCH_BYTES,
                linger_ms=0,
                retry_backoff_ms=TRANSACTION_RETRY_BACKOFF_MS,
            )
            await producer.start()  # InitProducerId: the partition's previous owner is fenced, its open batch aborted
            startup.reached("producer fenced")
            self._producers[partition] = producer
        return producer

    async def _batch(self, tp: TopicPartition, fetched: _Fetched, taken: float) -> None:
        partition, records = tp.partition, fetched.records
        producer = await self._producer(partition)
        batch = [InRecord(partition, r.offset, r.key, r.value, r.timestamp) for r in records]
        token = _current.set(producer)
        opened = time.monotonic()
        try:
            async with producer.transaction():
                cpu, settled = time.thread_time(), self.runtime.settle_cpu_s
                _, deliveries = await self.runtime.submit(batch, self.backlog)
                cycled, cycle_cpu = time.time(), time.thread_time() - cpu
                delivered = await asyncio.gather(*deliveries)
                for meta in delivered:
                    if meta.topic == self.names.decisions and meta.partition == partition:
                        self.runtime.decisions_end[partition] = max(
                            self.runtime.decisions_end.get(partition, 0), meta.offset + 1
                        )
                await self._write_snapshot(producer, partition)
            startup.reached("first batch committed")
            self._uncommitted[tp] = records[-1].offset + 1
            self._maybe_snapshot(partition)
            self._hops.batch(partition, records[0].offset, records[-1].offset,
                             fetched=fetched.at, taken=taken, cycled=cycled, committed=time.time(),
                             cycle_cpu=cycle_cpu, settle_cpu=self.runtime.settle_cpu_s - settled)
        except BaseException as exc:
            self.runtime.forget([partition])  # the engine may hold decisions the aborted transaction dropped
            await self._close([partition])
            if isinstance(exc, KafkaError):
                self._outlasted(partition, time.monotonic() - opened)
            raise
        finally:
            _current.reset(token)

    def _outlasted(self, partition: int, open_s: float) -> None:
        """A partition's transaction failed after ``open_s``: when that is past the transaction timeout, the broker
        has aborted it, and the same batch decided again would be too; later producers get a longer timeout."""
        if open_s * 1000 < self.transaction_timeout_ms or self.transaction_timeout_ms >= MAX_TRANSACTION_TIMEOUT_MS:
            return
        longer = min(MAX_TRANSACTION_TIMEOUT_MS, max(2 * self.transaction_timeout_ms, math.ceil(2000 * open_s)))
        log.warning("processor: partition %d's transaction was open %.1f s, past its timeout of %d ms;"
                    " transactions now time out after %d ms", partition, open_s, self.transaction_timeout_ms, longer)
        self.transaction_timeout_ms = longer

    async def _commit_offsets(self, consumer: AIOKafkaConsumer, only: Collection[TopicPartition] | None = None) -> None:
        """Commit the group's offsets past the batches processed (``only``: of these partitions); the caller holds
        ``_busy``."""
        offsets = {tp: end for tp, end in self._uncommitted.items() if only is None or tp in only}
        for tp in offsets:
            del self._uncommitted[tp]
        self._committed_at = time.monotonic()
        if not offsets:
            return
        try:
            await consumer.commit(offsets)
        except KafkaError as exc:  # a rebalance: the partitions kept are committed next time
            log.warning("processor: committing offsets failed: %r", exc)
            for tp, end in offsets.items():
                if tp in consumer.assignment():
                    self._uncommitted.setdefault(tp, end)

    def _maybe_snapshot(self, partition: int) -> None:
        """After a committed batch, start encoding the partition's engine when a snapshot is due (``encode_aside``):
        the snapshot holds only committed decisions and is written by a later transaction (``_write_snapshot``)."""
        engine = self.runtime.engines.get(partition)
        now = time.monotonic()
        if (
            self.snapshot_interval_s <= 0
            or engine is None
            or partition in self._encoding
            or engine.awaiting
            or self.runtime.deferred(partition)
            or now - self._snapshot_at.get(partition, -self.snapshot_interval_s) < self.snapshot_interval_s
        ):
            return
        snapshot = snapshots.Snapshot(engine, self.runtime.decisions_end.get(partition, 0))
        self._encoding[partition] = asyncio.ensure_future(snapshots.encode_aside(snapshot))
        self._snapshot_at[partition] = now

    async def _write_snapshot(self, producer: AIOKafkaProducer, partition: int) -> None:
        """Send the partition's encoded snapshot, once its encoding is done, into the running transaction."""
        encoding = self._encoding.get(partition)
        if encoding is None or not encoding.done():
            return
        del self._encoding[partition]
        try:
            value = encoding.result()
        except Exception as exc:  # the next one is due after the interval; until then a rebuild folds more
            log.warning("processor: encoding partition %d's snapshot failed: %r", partition, exc)
            return
        await producer.send(self.state_topic, value, key=snapshots.key(partition), partition=partition)

    async def _write_snapshots(self) -> None:
        """Each encoded snapshot waiting for a transaction, in one of its own (an idle partition has no batch);
        the caller holds ``_busy``."""
        for partition in sorted(p for p, encoding in self._encoding.items() if encoding.done()):
            producer = self._producers.get(partition)
            if producer is None:
                continue
            try:
                async with producer.transaction():
                    await self._write_snapshot(producer, partition)
            except BaseException:
                self.runtime.forget([partition])
                await self._close([partition])
                raise

    async def _close(self, partitions: list[int]) -> None:
        for partition in partitions:
            producer = self._producers.pop(partition, None)
            self._snapshot_at.pop(partition, None)
            encoding = self._encoding.pop(partition, None)
            if encoding is not None:  # let the child finish; its snapshot is not written
                encoding.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._uncommitted.pop(TopicPartition(self.names.cluster_events, partition), None)
            if producer is not None:
                await producer.stop()

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """After the batch in flight: commit the revoked partitions' offsets, drop their state and
        producers (their next owner fences)."""
        async with self._busy:
            gone = sorted(tp.partition for tp in revoked if tp.topic == self.names.cluster_events)
            if self.consumer is not None:
                await self._commit_offsets(self.consumer, only=revoked)
            self.runtime.forget(gone)
            await self._close(gone)
            for tp in revoked:
                self._fetched.pop(tp, None)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Nothing to do before a partition's first batch, which rebuilds its state."""
        startup.reached("assigned")
