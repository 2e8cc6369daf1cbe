"""The scheduler agent: cluster-events batches -> ``SchedulerRuntime.process`` (decode, core, send).

On Apache Kafka the batches come from ``exactly_once.TransactionalLoop`` (bulk reads, a transaction per batch)
run as an app task instead of the faust agent; what follows describes the agent (Tansu).

Partitions revoked in a rebalance and assigned again in the next generation keep their state; the others drop
it and are rebuilt from the log at once, all concurrently, while the consumer starts fetching (``runtime.py``,
``assigned(ahead=True)``). A batch's
offsets are committed by a background task once its decisions are on the broker, so the agent goes on to the next
batch without waiting for the commit's round trip. After a batch whose decisions are all acknowledged, a due
engine snapshot is written (``acked_snapshots.py``), which later rebuilds start from.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal as signals
from collections.abc import AsyncIterator, Sequence
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, EventT
from mode.types.signals import BaseSignalT

from kai_stream import prefork, succession
from kai_stream.core.events import Model, dumps
from kai_stream.internals import faust_commit, faust_kafka_consumer, faust_kafka_producer, member_id
from kai_stream.kafka import send_unit
from kai_stream.observability import Health, HealthSettings, serve_health
from kai_stream.streams import snapshots, startup, tables, topics
from kai_stream.streams.acked_snapshots import AckedSnapshots
from kai_stream.streams.app import BULK, PARTITIONS, app, kafka, names, settings
from kai_stream.streams.exactly_once import TransactionalLoop
from kai_stream.streams.runtime import InRecord, SchedulerRuntime, load_scheduler_config

log = logging.getLogger(__name__)


async def _send(topic: str, partition: int, key: bytes, record: Model) -> Any:
    """Hand one record (canonical bytes, as the ``kai-stream`` codec writes them) to faust's producer; returns
    the delivery future. Straight to the producer: faust's ``Topic.send`` machinery (message wrappers,
    callbacks, codec lookup) cost about as much as the send itself."""
    return await app.producer.send(topic, key, dumps(record), partition, None, None)


async def _send_unit(topic: str, partition: int, key: bytes, values: Sequence[bytes]) -> Any:
    """Hand one cycle's records of a pool to faust's producer as one record batch (appended whole or not at all)."""
    producer = app.producer
    assert isinstance(producer, faust_aiokafka.Producer)
    return await send_unit(faust_kafka_producer(producer), topic, partition, key, values)


runtime = SchedulerRuntime(
    kafka,
    names,
    load_scheduler_config(settings.config_path),
    _send,
    partitions=PARTITIONS["decisions"],
    max_cycle_delay_s=settings.max_cycle_delay_s,
    fair_share_interval_s=settings.fair_share_interval_s,
    gc_freeze_interval_s=settings.gc_freeze_interval_s,
    cycle_on_tick=settings.cycle_on == "tick",
    metrics_interval_s=settings.metrics_interval_s,
    send_unit=_send_unit,
)


def _backlog(partition: int, last_offset: int) -> int:
    """Records of the partition known (from fetch high-watermarks) to follow ``last_offset``."""
    try:
        high = app.consumer.highwater(TP(names.cluster_events, partition))
    except Exception:
        return 0
    return max(0, (high or 0) - last_offset - 1)


def _remember_fair_share(pool: str, shares: dict[str, dict[str, float]]) -> None:
    for queue, share in shares.items():
        tables.fair_share[f"{pool}/{queue}"] = share


if settings.fair_share_table:
    runtime.on_fair_share.append(_remember_fair_share)


class _Committer:
    """Commits the offsets of batches whose decisions are on the broker, off the agent's path.

    Done here rather than by faust's periodic committer: faust commits the longest run of acknowledged offsets
    and, after a restart with re-deliveries, that run can stop at a gap for good (seen on Tansu), which
    would leave the group's offsets behind forever. faust's own bookkeeping is moved along so it never
    commits an older offset over ours. Offsets handed over while a commit is in flight are merged into the
    next one (never lower than what is committed).
    """

    def __init__(self) -> None:
        self._pending: dict[TP, int] = {}
        self._wake = asyncio.Event()

    def add(self, batch: list[EventT[Any]]) -> None:
        """The batch's decisions are acknowledged: its offsets may be committed."""
        for event in batch:
            tp = event.message.tp
            self._pending[tp] = max(self._pending.get(tp, 0), event.message.offset + 1)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            offsets, self._pending = self._pending, {}
            if offsets:
                try:
                    await self._commit(offsets)
                except Exception as exc:  # left uncommitted: re-delivered after a restart, deduplicated there
                    log.warning("processor: commit failed: %r", exc)

    @staticmethod
    async def _commit(offsets: dict[TP, int]) -> None:
        await faust_commit(app.consumer, offsets)


committer = _Committer()
acked_snapshots = (
    AckedSnapshots(runtime, kafka, snapshots.topic_name(settings.app_id), settings.snapshot_interval_s)
    if not BULK and settings.snapshot_interval_s > 0
    else None
)


def _record(event: EventT[Any]) -> InRecord:
    message = event.message
    return InRecord(message.partition, message.offset, message.key, message.value, int(message.timestamp * 1000))


health = Health("processor", stale_after_s=60)
health.set_condition("assigned", False, "waiting for partitions")


async def schedule(stream: Any) -> AsyncIterator[None]:
    async for batch in stream.take_events(settings.batch_max, within=settings.batch_within_s):
        health.working()
        try:
            await runtime.process([_record(event) for event in batch], _backlog)
        except Exception as exc:
            # state may hold decisions that never reached the topic: rebuild from the log on the next record
            runtime.forget_all()
            health.failed(repr(exc)[:500])
            raise
        committer.add(batch)
        if acked_snapshots is not None:
            await acked_snapshots.after_batch({event.message.partition for event in batch})
        health.done()
        yield None


def _batch_done(ok: bool) -> None:
    if ok:
        health.done()
    else:
        health.failed("batch failed: state rebuilt from the log")


if BULK:
    loop = TransactionalLoop(
        runtime,
        kafka,
        names,
        group_id=settings.app_id,
        batch_max=settings.batch_max,
        snapshot_interval_s=settings.snapshot_interval_s,
        transaction_timeout_ms=settings.transaction_timeout_ms,
        commit_interval_s=settings.commit_interval_s,
        instance_id=settings.instance_id,
        on_batch=_batch_done,
    )
    app.task(loop.run)
else:
    app.agent(topics.cluster_events)(schedule)

    @app.task  # type: ignore[untyped-decorator]
    async def _commit_offsets() -> None:
        await committer.run()

    if acked_snapshots is not None:
        app.task(acked_snapshots.start)


@app.task  # type: ignore[untyped-decorator]
async def _serve_health() -> None:
    health_settings = HealthSettings()
    if health_settings.enabled and health_settings.port != 0:
        await serve_health(health, health_settings)


@app.timer(5.0)  # type: ignore[untyped-decorator]
async def _alive() -> None:
    health.idle_beat()


_orphaned = False


@app.timer(1.0)  # type: ignore[untyped-decorator]
async def _parent_alive() -> None:
    global _orphaned
    parent = prefork.supervisor_pid if prefork.supervised else settings.parent_pid
    if parent is None or _orphaned or os.getppid() == parent:
        return
    _orphaned = True
    log.warning("processor: parent process %d is gone; stopping", parent)
    os.kill(os.getpid(), signals.SIGTERM)


@app.on_partitions_assigned.connect
async def _assigned(sender: Any, /, *args: Any, signal: BaseSignalT[Any], **kwargs: Any) -> None:
    assigned: set[TP] = args[0] if args else kwargs.get("assigned", set())
    startup.reached("faust group assigned")
    if not BULK:
        succession.record(settings.app_id, member_id(faust_kafka_consumer(app.consumer)))
    runtime.assigned(
        [tp.partition for tp in assigned if tp.topic == names.cluster_events], app.consumer_generation_id, ahead=True
    )
    health.set_condition("assigned", True)


@app.on_partitions_revoked.connect
async def _revoked(sender: Any, /, *args: Any, signal: BaseSignalT[Any], **kwargs: Any) -> None:
    revoked: set[TP] = args[0] if args else kwargs.get("revoked", set())
    runtime.revoked([tp.partition for tp in revoked if tp.topic == names.cluster_events], app.consumer_generation_id)
