"""Engine snapshots on a broker without transactions or compaction (Tansu): written only after what they cover is
acknowledged, and found again by reading the state topic's last offsets.

On Apache Kafka a snapshot rides in the transaction after the one whose decisions it reflects (``exactly_once.py``).
Tansu has no transactions, so here the faust agent asks for one after ``SchedulerRuntime.process`` returned, that
is once every decision of the batch is acknowledged: the snapshot's ``decisions_from`` (the decisions topic's
offset past the last record the engine folded, kept by the runtime from its deliveries) never claims a decision
that was not appended. A kill between the batch and the snapshot only leaves an older snapshot as the latest.

Tansu keeps every record (no compaction, no retention, no DeleteRecords): on Tansu the snapshots go to generations
of topics, the old ones deleted whole (``snapshot_generations.py``), so they take a bounded room; on any other
broker to the compacted state topic. ``snapshots.latest`` finds the last one either way. A snapshot is used only
by the same code version and config hash, as on Kafka.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Collection

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from kai_stream.kafka import make_admin, make_producer
from kai_stream.quirks import tansu_workarounds
from kai_stream.settings import KafkaSettings
from kai_stream.streams import snapshots
from kai_stream.streams.runtime import SchedulerRuntime
from kai_stream.streams.snapshot_generations import SNAPSHOTS_PER_GENERATION, Generations

log = logging.getLogger(__name__)


class AckedSnapshots:
    """Writes each partition's engine to ``topic`` (on Tansu: its generations, ``per_generation`` snapshots each)
    at most every ``interval_s``, after an acknowledged batch."""

    def __init__(
        self,
        runtime: SchedulerRuntime,
        kafka: KafkaSettings,
        topic: str,
        interval_s: float,
        per_generation: int = SNAPSHOTS_PER_GENERATION,
    ) -> None:
        self.runtime = runtime
        self.kafka = kafka
        self.topic = topic
        self.interval_s = interval_s
        self.per_generation = per_generation
        self._producer: AIOKafkaProducer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._generations: Generations | None = None
        self._taken_at: dict[int, float] = {}
        self._writing: dict[int, asyncio.Task[None]] = {}
        runtime.state_topic = topic

    async def start(self) -> None:
        producer = make_producer(self.kafka, max_request_size=snapshots.MAX_SNAPSHOT_BYTES)
        if tansu_workarounds(self.kafka):
            self._admin = make_admin(self.kafka)
            await self._admin.start()
            self._generations = Generations(self._admin, producer, self.topic, self.per_generation)
        else:
            await snapshots.ensure_topic(self.kafka, self.topic, self.runtime.partitions)
        await producer.start()
        self._producer = producer

    async def stop(self) -> None:
        for task in self._writing.values():
            task.cancel()
        if self._producer is not None:
            await self._producer.stop()
        if self._admin is not None:
            await self._admin.close()

    def due(self, partition: int, now: float) -> bool:
        """Whether ``partition``'s engine is settled (nothing deferred, no recorded decision awaiting its input, no
        malformed record of a rebuild still being dead-lettered) and its last snapshot is ``interval_s`` old; a
        snapshot being written makes the next one wait."""
        engine = self.runtime.engines.get(partition)
        return (
            self._producer is not None
            and engine is not None
            and not engine.awaiting
            and not self.runtime.deferred(partition)
            and not self.runtime.letting_out
            and partition not in self._writing
            and now - self._taken_at.get(partition, -self.interval_s) >= self.interval_s
        )

    async def after_batch(self, partitions: Collection[int]) -> None:
        """Call after ``process`` returned (every decision acknowledged): snapshot the due partitions as they are
        now. Returns once each child encoding one is forked (what the engine does next is not in its copy); the
        encoding and the write go on in the background."""
        now = time.monotonic()
        started = False
        for partition in sorted(set(partitions)):
            if not self.due(partition, now):
                continue
            snapshot = snapshots.Snapshot(self.runtime.engines[partition], self.runtime.decisions_end.get(partition, 0))
            self._taken_at[partition] = now
            task = asyncio.get_running_loop().create_task(self._write(partition, snapshot))
            task.add_done_callback(functools.partial(self._written, partition))
            self._writing[partition] = task
            started = True
        if started:
            await asyncio.sleep(0)  # the tasks run up to their fork

    async def _write(self, partition: int, snapshot: snapshots.Snapshot) -> None:
        value = await snapshots.encode_aside(snapshot)
        assert self._producer is not None
        if self._generations is None:
            await (await self._producer.send(self.topic, value, key=snapshots.key(partition), partition=partition))
            return
        topic = await self._generations.topic_for(partition, id(snapshot.engine))
        await (await self._producer.send(topic, value, key=snapshots.key(partition), partition=0))
        await self._generations.acknowledged(partition)

    def _written(self, partition: int, done: asyncio.Task[None]) -> None:
        self._writing.pop(partition, None)
        if not done.cancelled() and done.exception() is not None:
            log.warning("processor: writing partition %d's snapshot failed: %r", partition, done.exception())
