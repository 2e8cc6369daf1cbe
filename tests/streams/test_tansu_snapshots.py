"""On Tansu (no transactions, no compaction): a processor that snapshots its engine after an acknowledged batch
rebuilds from the last snapshot and the logs' tail to exactly the engine a rebuild from offset 0 makes, and decides
the same next records; the snapshot says which decisions it holds, and a snapshot of another config is not used.
The snapshots take a bounded room (generations of topics, the old ones deleted), in Tansu's memory and on its s3
storage's disk, and the latest is found through rotations, restarts and deletions."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

import kai_stream
from kai_stream.broker import EmbeddedBroker
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ClusterEvent, Model, dumps
from kai_stream.core.manifests import load_scenario
from kai_stream.internals import kafka_client
from kai_stream.kafka import (
    UNIT_MAX_BYTES,
    make_admin,
    make_consumer,
    make_producer,
    partition_for,
    read_topic,
    send_unit,
    topic_partitions,
)
from kai_stream.settings import KafkaSettings
from kai_stream.streams import snapshot_generations, snapshots
from kai_stream.streams.acked_snapshots import AckedSnapshots
from kai_stream.streams.engine import PartitionEngine
from kai_stream.streams.runtime import InRecord, SchedulerRuntime
from kai_stream.streams.snapshot_generations import generation_topic, generations
from kai_stream.topics import TopicNames
from tests.broker.admin import create_topic
from tests.engines import EngineUnderTest
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

    async def send_whole(topic: str, p: int, key: bytes, values: Sequence[bytes]) -> Any:
        return await send_unit(producer, topic, p, key, values)

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


def _folded(partitions: int, settings: KafkaSettings) -> SchedulerRuntime:
    """A runtime whose partitions' engines have folded the reclaim scenario (no log behind them: only written)."""
    names = TopicNames.with_prefix("x-")
    runtime = SchedulerRuntime(settings, names, SchedulerConfig(), _Capture(), partitions=partitions)
    for partition in range(partitions):
        engine = runtime._new_engine(partition)
        for offset, event in enumerate(_events()):
            engine.fold(offset, event)
        runtime.engines[partition] = engine
    return runtime


async def _snapshot_after_ticks(writer: AckedSnapshots, count: int) -> dict[int, list[int]]:
    """``count`` times: every engine of the writer's runtime folds a tick, then is snapshotted (each write
    acknowledged before the next); the engine offsets written, per partition."""
    runtime = writer.runtime
    written: dict[int, list[int]] = {partition: [] for partition in runtime.engines}
    for _ in range(count):
        for partition, engine in runtime.engines.items():
            engine.fold(engine.offset + 1, tick(float(engine.offset)))
            written[partition].append(engine.offset)
        await writer.after_batch(list(runtime.engines))
        await asyncio.gather(*writer._writing.values())
    return written


async def _stored(settings: KafkaSettings, state_topic: str, partition: int) -> dict[str, int]:
    """The records each generation topic of ``partition`` holds now."""
    consumer = make_consumer(settings, group_id=None)
    await consumer.start()
    try:
        listed = (await kafka_client(consumer).fetch_all_metadata()).topics()
    finally:
        await consumer.stop()
    return {
        topic: len(await read_topic(settings, topic))
        for g in generations(listed, state_topic, partition)
        if (topic := generation_topic(state_topic, partition, g))
    }


async def test_snapshots_on_tansu_stay_within_two_generations_and_a_restart_finds_the_latest(
    kafka_settings: KafkaSettings, topic_prefix: str
) -> None:
    """Generations of ``per_generation`` snapshots, each partition's old ones deleted: 15 snapshots of each of two
    partitions leave at most ``2 * per_generation + 1`` records of it at any moment, and the latest is found; a
    restarted writer (its engines rebuilt, so new) starts a generation above all and deletes what is below the one
    before it; an empty highest generation (a writer killed between creating and writing it) is passed over."""
    state_topic = f"{topic_prefix}engine-changelog"
    per_generation = 2
    bound = 2 * per_generation + 1
    runtime = _folded(2, kafka_settings)
    writer = AckedSnapshots(runtime, kafka_settings, state_topic, interval_s=0.0, per_generation=per_generation)
    await writer.start()
    peaks = {0: 0, 1: 0}
    written: dict[int, list[int]] = {0: [], 1: []}
    try:
        for _ in range(15):
            for partition, offsets in (await _snapshot_after_ticks(writer, 1)).items():
                written[partition].extend(offsets)
                stored = await _stored(kafka_settings, state_topic, partition)
                peaks[partition] = max(peaks[partition], sum(stored.values()))
                assert sum(stored.values()) <= bound and len(stored) <= 3, stored
        assert writer._producer is not None
        await writer._producer.client.force_metadata_update()  # Tansu creates any topic a metadata request names
    finally:
        await writer.stop()
    assert peaks == {0: 2 * per_generation, 1: 2 * per_generation}  # 2K+1 only until the rotation's deletion
    for partition in (0, 1):
        stored = await _stored(kafka_settings, state_topic, partition)
        assert sorted(stored) == [generation_topic(state_topic, partition, g) for g in (6, 7)], stored
        assert list(stored.values()) == [per_generation, 1]

    fresh = {p: PartitionEngine.for_config(p, SchedulerConfig(), kai_stream.__version__) for p in (0, 1)}
    found = await snapshots.latest_of(kafka_settings, state_topic, fresh)
    assert {p: s.engine.offset if s else None for p, s in found.items()} == {p: written[p][-1] for p in (0, 1)}
    other = PartitionEngine.for_config(0, SchedulerConfig(stale_gang_grace_s=30.0), kai_stream.__version__)
    assert await snapshots.latest(kafka_settings, state_topic, 0, usable_by=other) is None

    await create_topic(kafka_settings, generation_topic(state_topic, 0, 8))  # created, never written
    latest = await snapshots.latest(kafka_settings, state_topic, 0, usable_by=fresh[0])
    assert latest is not None and latest.engine.offset == written[0][-1]

    restarted = _folded(1, kafka_settings)
    restarted.engines[0] = latest.engine
    writer = AckedSnapshots(restarted, kafka_settings, state_topic, interval_s=0.0, per_generation=per_generation)
    await writer.start()
    try:
        again = await _snapshot_after_ticks(writer, 1)
    finally:
        await writer.stop()
    stored = await _stored(kafka_settings, state_topic, 0)
    assert sorted(stored) == [generation_topic(state_topic, 0, g) for g in (8, 9)]
    assert list(stored.values()) == [0, 1]
    latest = await snapshots.latest(kafka_settings, state_topic, 0, usable_by=fresh[0])
    assert latest is not None and latest.engine.offset == again[0][-1] > written[0][-1]


async def test_a_reader_that_listed_a_generation_deleted_since_lists_again(
    kafka_settings: KafkaSettings, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader lists the topics, then the writer rotates and deletes what the reader listed: the read finds
    nothing there (Tansu even creates the topic again, empty), so the reader lists again and finds the latest."""
    state_topic = f"{topic_prefix}engine-changelog"
    runtime = _folded(1, kafka_settings)
    writer = AckedSnapshots(runtime, kafka_settings, state_topic, interval_s=0.0, per_generation=1)
    await writer.start()
    try:
        written = await _snapshot_after_ticks(writer, 3)
    finally:
        await writer.stop()
    assert sorted(await _stored(kafka_settings, state_topic, 0)) == [
        generation_topic(state_topic, 0, g) for g in (1, 2)
    ]
    listings: list[list[TopicPartition]] = []
    real = snapshot_generations.candidates

    def first_before_the_rotation(*args: Any) -> list[TopicPartition]:
        listings.append(real(*args) if listings else [TopicPartition(generation_topic(state_topic, 0, 0), 0)])
        return listings[-1]

    monkeypatch.setattr(snapshot_generations, "candidates", first_before_the_rotation)
    fresh = PartitionEngine.for_config(0, SchedulerConfig(), kai_stream.__version__)
    latest = await snapshots.latest(kafka_settings, state_topic, 0, usable_by=fresh)
    assert latest is not None and latest.engine.offset == written[0][-1]
    assert len(listings) == 2


async def test_snapshots_on_tansu_durable_storage_take_a_bounded_room_on_disk(tmp_path: Path) -> None:
    """On Tansu's s3 storage a deleted generation's files go: 24 snapshots written, the state topics' directories
    never hold more than ``2 * per_generation + 1`` of them (plus their watermark files)."""
    broker = EmbeddedBroker(memory=False, unsafe_durable=True, data_dir=tmp_path)
    await asyncio.to_thread(broker.start)
    try:
        settings = KafkaSettings(bootstrap_servers=broker.bootstrap_servers, client_id="kai-stream-test")
        state_topic = "durable-engine-changelog"
        per_generation = 2
        runtime = _folded(1, settings)
        size = len(snapshots.encode(snapshots.Snapshot(runtime.engines[0], 0)))
        topics_dir = tmp_path / "s3" / "tansu" / "clusters" / "kai-stream" / "topics"
        writer = AckedSnapshots(runtime, settings, state_topic, interval_s=0.0, per_generation=per_generation)
        await writer.start()
        on_disk: list[int] = []
        try:
            for _ in range(24):
                await _snapshot_after_ticks(writer, 1)
                on_disk.append(sum(f.stat().st_size for f in topics_dir.rglob("*") if f.is_file()))
        finally:
            await writer.stop()
    finally:
        await asyncio.to_thread(broker.stop)
    assert max(on_disk) <= (2 * per_generation + 1) * (size + 1024), (size, on_disk)
    assert on_disk[-1] < 24 * size / 4


@pytest.mark.kafka
async def test_generations_are_tansus_alone_and_kafkas_state_topic_is_compacted(
    engine: EngineUnderTest, topic_prefix: str
) -> None:
    """The snapshot writer rotates generations on Tansu only; on Apache Kafka it writes the state topic, which is
    compacted (the broker keeps the last snapshot per partition key), and no generation topic appears."""
    state_topic = f"{topic_prefix}engine-changelog"
    runtime = _folded(1, engine.settings)
    writer = AckedSnapshots(runtime, engine.settings, state_topic, interval_s=0.0, per_generation=1)
    await writer.start()
    try:
        written = await _snapshot_after_ticks(writer, 3)
    finally:
        await writer.stop()
    admin = make_admin(engine.settings)
    await admin.start()
    try:
        listed = await admin.list_topics()
        if engine.is_kafka:
            described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, state_topic)])
            configs = {entry[0]: entry[1] for entry in described[0].resources[0][4]}
    finally:
        await admin.close()
    if engine.is_kafka:
        assert state_topic in listed and not generations(listed, state_topic, 0)
        assert configs["cleanup.policy"] == "compact"
    else:
        assert state_topic not in listed and generations(listed, state_topic, 0) == [1, 2]
    fresh = PartitionEngine.for_config(0, SchedulerConfig(), kai_stream.__version__)
    latest = await snapshots.latest(engine.settings, state_topic, 0, usable_by=fresh)
    assert latest is not None and latest.engine.offset == written[0][-1]
