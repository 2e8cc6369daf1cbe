"""Hostile input: random bytes and poison records that are valid JSON reach the processor's decode path and the
history sink; every one is dead-lettered (or archived as Malformed) with a reason, no dead letter exceeds a
producer's request limit, and the processor's state is what the valid records alone make it."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any, cast

import orjson
from aiokafka import ConsumerRecord

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindRequested,
    DeadLetter,
    Model,
    PodObserved,
    PodSpec,
    Resources,
    dumps,
    loads_cluster_event,
)
from kai_stream.core.manifests import load_scenario
from kai_stream.history.schema import write_segment
from kai_stream.history.sink import record_row
from kai_stream.kafka import make_producer, partition_for, read_topic
from kai_stream.settings import KafkaSettings
from kai_stream.streams.runtime import InRecord, SchedulerRuntime
from kai_stream.topics import TopicNames

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 8
HOME = partition_for("default", PARTITIONS)
PRODUCER_LIMIT = 1024 * 1024


def _pod(**changes: Any) -> dict[str, Any]:
    spec = PodSpec(namespace="ns", name="evil", uid="evil-uid", queue="team-a", requests=Resources(gpu_milli=1000))
    event = PodObserved(event_id="evil-event", ts=5.0, pod=spec)
    raw: dict[str, Any] = orjson.loads(dumps(event))
    for path, value in changes.items():
        target = raw
        *parents, leaf = path.split(".")
        for part in parents:
            target = target[part]
        target[leaf] = value
    return raw


def _other_pool() -> str:
    return next(f"pool-{i}" for i in range(100) if partition_for(f"pool-{i}", PARTITIONS) != HOME)


def hostile_values() -> list[bytes]:
    rng = random.Random(20)
    values = [rng.randbytes(rng.randint(0, 300)) for _ in range(40)]
    values += [b"", b"\xff" * (1024 * 1024), b"{" * 200_000, b"[" * 100_000 + b"]" * 100_000]
    values.append(orjson.dumps(_pod(**{"pod.requests.gpu_milli": -4000})))
    values.append(orjson.dumps(_pod(**{"pod.requests.cpu_milli": -1})))
    values.append(orjson.dumps(_pod(**{"pod.gpu_indices": [-1], "pod.node_name": "node-1"})))
    values.append(orjson.dumps(_pod(**{"pod.name": "x" * 10_000})))
    values.append(orjson.dumps(_pod(**{"pod.labels": {f"k{i}": "v" for i in range(5000)}})))
    values.append(orjson.dumps(_pod(pool=_other_pool(), **{"pod.pool": _other_pool()})))
    values.append(dumps(PodObserved(event_id="e", ts=1.0, pod=PodSpec(namespace="n", name="p", uid="u", queue="q")))
                  .replace(b'"ts":1.0', b'"ts":1e999'))
    values.append(orjson.dumps(_pod(**{"pod.requests.gpu_milli": 123456789})).replace(b"123456789", b"9" * 30))
    values.append(orjson.dumps(_pod(**{"pod.priority": 123456789})).replace(b"123456789", b"-" + b"9" * 20))
    values.append(orjson.dumps(_pod(ts=-5.0)))
    values.append(b'{"type":"Tick","event_id":"t","ts":NaN}')
    values.append(b'{"type":"Tick","event_id":"t","ts":' + b"9" * 5000 + b"}")
    values.append(b'{"type":"Tick","event_id":"\\ud800","ts":1}')
    values.append(orjson.dumps({"type": "Tick", "event_id": "t", "ts": 1.0, "pool": "p" * 1000}))
    values.append(orjson.dumps({"type": "DeadLetter", "garbage": "x" * 900_000}))
    node = {"name": "n-huge", "allocatable": {"gpu_milli": 2**62, "cpu_milli": 1000, "memory": 1}}
    values.append(orjson.dumps({"type": "NodeObserved", "event_id": "nh", "ts": 1.0, "node": node}))
    return values


class _Sent:
    def __init__(self) -> None:
        self.records: list[tuple[str, int, bytes, Model]] = []

    async def __call__(self, topic: str, partition: int, key: bytes, record: Model) -> Any:
        self.records.append((topic, partition, key, record))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def _runtime(send: _Sent) -> SchedulerRuntime:
    names = TopicNames()
    runtime = SchedulerRuntime(KafkaSettings(), names, SchedulerConfig(), send, partitions=PARTITIONS)
    runtime.engines[HOME] = runtime._new_engine(HOME)
    return runtime


def _valid() -> list[bytes]:
    return [dumps(event) for event in load_scenario((ROOT / "examples" / "fair-share.yaml").read_text())]


def _binds(sent: _Sent) -> list[tuple[str, str]]:
    return sorted((r.uid, r.node) for _, _, _, r in sent.records if isinstance(r, BindRequested))


async def test_every_hostile_record_is_dead_lettered_and_changes_nothing() -> None:
    hostile = hostile_values()
    for value in hostile:
        try:
            event = loads_cluster_event(value)
        except ValueError:
            continue
        assert partition_for(event.pool, PARTITIONS) != HOME, value[:200]

    clean_sent = _Sent()
    clean = _runtime(clean_sent)
    records = [InRecord(HOME, offset, b"default", value, 1000) for offset, value in enumerate(_valid())]
    await clean.process(records)

    mixed_sent = _Sent()
    mixed = _runtime(mixed_sent)
    stream: list[InRecord] = []
    offset = 0
    for value in _valid():
        for poison in hostile[:2]:
            stream.append(InRecord(HOME, offset, b"k" * 2_000_000 if offset % 7 == 0 else None, poison, 10**17))
            offset += 1
        hostile = hostile[2:]
        stream.append(InRecord(HOME, offset, b"default", value, 1000))
        offset += 1
    for poison in hostile:
        stream.append(InRecord(HOME, offset, None, poison, -(10**15)))
        offset += 1
    await mixed.process(stream)

    letters = [(cast(DeadLetter, r), key) for topic, _, key, r in mixed_sent.records if topic == "dead-letter"]
    assert len(letters) == len(hostile_values())
    for letter, key in letters:
        assert isinstance(letter, DeadLetter)
        assert letter.reason
        assert len(dumps(letter)) + len(key) < PRODUCER_LIMIT // 2
        assert DeadLetter.model_validate_json(dumps(letter)) == letter
    assert any("misrouted" in letter.reason for letter, _ in letters)
    assert any(letter.truncated and letter.size == 1024 * 1024 for letter, _ in letters)

    assert _binds(clean_sent) and _binds(mixed_sent) == _binds(clean_sent)
    before = clean.engines[HOME].pools["default"].state
    after = mixed.engines[HOME].pools["default"].state
    assert after.pods == before.pods and after.nodes == before.nodes and after.queues == before.queues
    assert after.now == before.now and sorted(after.assumed) == sorted(before.assumed)
    assert sorted(mixed.engines[HOME].pools) == ["default"]


def test_history_sink_archives_any_bytes(tmp_path: Path) -> None:
    rows = []
    for offset, value in enumerate([*hostile_values(), *_valid()]):
        for topic in ("cluster-events", "decisions", "dead-letter", "bind-results"):
            record: ConsumerRecord[bytes, bytes] = ConsumerRecord(
                topic, 0, offset, 1000, 0, None, value, None, 0, len(value), ()
            )
            row, _ = record_row(record)
            rows.append(row)
    written = write_segment(rows, tmp_path / "cluster-events" / "0", "00-99")
    assert written.is_file()


async def test_a_rebuild_dead_letters_what_a_killed_instance_left_unlettered(
    kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    """The consumer may have committed past malformed records whose dead letters a killed instance never sent:
    the next rebuild letters them (once: a second rebuild finds them on the dead-letter topic)."""
    producer = make_producer(kafka_settings)
    await producer.start()

    async def send(topic: str, partition: int, key: bytes, record: Model) -> Any:
        return await producer.send(topic, dumps(record), key=key, partition=partition)

    try:
        values = [*_valid()[:3], b"\x00garbage", *_valid()[3:6], b'{"type":"Tick","event_id":"t","ts":1e999}']
        for value in values:
            await producer.send_and_wait(topics.cluster_events, value, key=b"default", partition=HOME)
        for _ in range(2):
            runtime = SchedulerRuntime(kafka_settings, topics, SchedulerConfig(), send, partitions=PARTITIONS)
            await runtime.rebuild(HOME, before=len(values))
    finally:
        await producer.stop()
    stored = await read_topic(kafka_settings, topics.dead_letter)
    letters = [DeadLetter.model_validate_json(r.value or b"") for r in stored]
    assert sorted(letter.offset for letter in letters) == [3, 7]
    assert all(letter.reason.startswith("malformed cluster event") for letter in letters)
