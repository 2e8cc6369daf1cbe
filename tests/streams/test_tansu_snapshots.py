"""On Tansu (no transactions, no compaction): a processor that snapshots its engine after an acknowledged batch
rebuilds from the last snapshot and the logs' tail to exactly the engine a rebuild from offset 0 makes, and decides
the same next records; the snapshot says which decisions it holds, and a snapshot of another config is not used."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kai_stream
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ClusterEvent, Model, dumps
from kai_stream.core.manifests import load_scenario
from kai_stream.kafka import (
    UNIT_MAX_BYTES,
    make_consumer,
    make_producer,
    partition_for,
    read_topic,
    send_unit,
    topic_partitions,
)
from kai_stream.settings import KafkaSettings
from kai_stream.streams import snapshots
from kai_stream.streams.acked_snapshots import AckedSnapshots
from kai_stream.streams.engine import PartitionEngine
from kai_stream.streams.runtime import InRecord, SchedulerRuntime
from kai_stream.topics import TopicNames
from tests.streams.records import tick

ROOT = Path(__file__).resolve().parents[2]
POOL = "default"


def _events() -> list[ClusterEvent]:
    return list(load_scenario((ROOT / "examples" / "reclaim.yaml").read_text()))


class _Capture:
    """A runtime's send that keeps the records instead of publishing them."""

    def __init__(self) -> None:
        self.records: list[bytes] = []

    async def __call__(self, topic: str, partition: int, key: bytes, record: Model) -> Any:
        self.records.append(dumps(record))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def _batch(kafka: KafkaSettings, names: TopicNames, partition: int, first: int) -> list[InRecord]:
    return [
        InRecord(r.partition, r.offset, r.key, r.value, r.timestamp)
        for r in await read_topic(kafka, names.cluster_events)
        if r.partition == partition and r.offset >= first
    ]


async def test_a_rebuild_from_a_snapshot_and_the_tail_equals_the_rebuild_from_offset_0(
    kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    partitions = len(await _partitions(kafka_settings, topics))
    partition = partition_for(POOL, partitions)
    producer = make_producer(kafka_settings, max_batch_size=UNIT_MAX_BYTES, max_request_size=UNIT_MAX_BYTES + 2**20)
    await producer.start()

    async def publish(events: Sequence[ClusterEvent]) -> None:
        for event in events:
            await (await producer.send(topics.cluster_events, dumps(event), key=POOL.encode(), partition=partition))

    async def send(topic: str, p: int, key: bytes, record: Model) -> Any:
        return await producer.send(topic, dumps(record), key=key, partition=p)

    async def send_whole(topic: str, p: int, key: bytes, records: Sequence[Model]) -> Any:
        return await send_unit(producer, topic, p, key, [dumps(r) for r in records])

    state_topic = f"{topics.cluster_events}-engine-changelog"
    events = _events()
    first, second = len(events) // 3, 2 * len(events) // 3
    try:
        live = SchedulerRuntime(
            kafka_settings, topics, SchedulerConfig(), send, partitions=partitions, send_unit=send_whole
        )
        writer = AckedSnapshots(live, kafka_settings, state_topic, interval_s=0.0)
        await writer.start()
        await publish([*events[:first], tick(5.0)])
        assert await live.process(await _batch(kafka_settings, topics, partition, 0))
        decided_before = live.decisions_end[partition]
        await writer.after_batch([partition])
        await asyncio.gather(*writer._writing.values())
        snapshot_offset = live.engines[partition].offset
        await publish([*events[first:second], tick(6.0)])
        assert await live.process(await _batch(kafka_settings, topics, partition, snapshot_offset + 1))
        assert live.decisions_end[partition] > decided_before, "the tail after the snapshot holds decisions"
        await publish([*events[second:], tick(7.0)])
        await writer.stop()
    finally:
        await producer.stop()

    fresh = PartitionEngine.for_config(partition, SchedulerConfig(), kai_stream.__version__)
    latest = await snapshots.latest(kafka_settings, state_topic, partition, usable_by=fresh)
    assert latest is not None
    assert (latest.engine.offset, latest.decisions_from) == (snapshot_offset, decided_before)

    async def rebuilt(
        state_topic: str | None, *, ahead: bool = False
    ) -> tuple[SchedulerRuntime, list[bytes], list[tuple[str, int]]]:
        capture = _Capture()
        runtime = SchedulerRuntime(kafka_settings, topics, SchedulerConfig(), capture, partitions=partitions)
        runtime.state_topic = state_topic
        reads: list[tuple[str, int]] = []
        read, read_many = runtime._read_partition, runtime._read_from_start

        async def spy(topic: str, p: int, start: int = 0) -> list[Any]:
            reads.append((topic, start))
            return await read(topic, p, start)

        async def spy_many(
            tps: list[tuple[str, int]], starts: dict[tuple[str, int], int] | None = None
        ) -> dict[tuple[str, int], list[Any]]:
            reads.extend((f"{topic} (shared)", (starts or {}).get((topic, p), 0)) for topic, p in tps if p == partition)
            return await read_many(tps, starts)

        runtime._read_partition = spy  # type: ignore[method-assign,assignment]
        runtime._read_from_start = spy_many  # type: ignore[method-assign,assignment]
        if ahead:
            runtime.assigned(range(partitions), generation=1, ahead=True)
        log_now = await _batch(kafka_settings, topics, partition, 0)
        await runtime.process(log_now[-1:])
        return runtime, capture.records, reads

    from_snapshot, resumed, resumed_reads = await rebuilt(state_topic)
    from_zero, replayed, replayed_reads = await rebuilt(None)
    ahead, resumed_ahead, ahead_reads = await rebuilt(state_topic, ahead=True)
    assert sorted(ahead_reads) == [  # one consumer for the partitions built ahead, each read past its snapshot
        (f"{topics.cluster_events} (shared)", snapshot_offset + 1),
        (f"{topics.decisions} (shared)", decided_before),
    ]
    assert resumed_ahead == replayed and ahead.engines[partition] == from_zero.engines[partition]
    assert (topics.cluster_events, snapshot_offset + 1) in resumed_reads
    assert (topics.decisions, decided_before) in resumed_reads
    assert (topics.cluster_events, 0) in replayed_reads
    assert replayed, "the rebuilt processor decides on the log's last records"
    assert resumed == replayed
    assert from_snapshot.engines[partition] == from_zero.engines[partition]  # every field but derived caches
    assert from_snapshot.decisions_end[partition] == from_zero.decisions_end[partition]

    for config, code in (
        (SchedulerConfig(stale_gang_grace_s=30.0), kai_stream.__version__),
        (SchedulerConfig(), "other"),
    ):
        usable_by = PartitionEngine.for_config(partition, config, code)
        assert await snapshots.latest(kafka_settings, state_topic, partition, usable_by=usable_by) is None


async def _partitions(kafka: KafkaSettings, names: TopicNames) -> list[int]:
    consumer = make_consumer(kafka, group_id=None)
    await consumer.start()
    try:
        return await topic_partitions(consumer, names.cluster_events)
    finally:
        await consumer.stop()


async def test_no_snapshot_is_taken_while_a_rebuilds_malformed_records_wait_for_their_dead_letters() -> None:
    runtime = SchedulerRuntime(
        KafkaSettings(), TopicNames.with_prefix("x-"), SchedulerConfig(), _Capture(), partitions=1
    )
    engine = runtime._new_engine(0)
    for offset, event in enumerate(_events()):
        engine.fold(offset, event)
    runtime.engines[0] = engine
    writer = AckedSnapshots(runtime, KafkaSettings(), "x-engine-changelog", interval_s=0.0)
    writer._producer = make_producer(KafkaSettings())
    assert writer.due(0, now=0.0)
    letting_out = asyncio.Event()

    async def dead_lettering() -> None:
        await letting_out.wait()

    runtime._letting_out.add(task := asyncio.get_running_loop().create_task(dead_lettering()))
    assert not writer.due(0, now=0.0), "the snapshot would cover records whose dead letters may be lost"
    letting_out.set()
    await task
    runtime._letting_out.discard(task)
    assert writer.due(0, now=0.0)
