"""The history sink on the real broker: a SIGKILL with a segment open loses nothing and duplicates nothing, and
bind results and dead letters are archived with where they were (topic, partition, offset) and their timestamps.

The crash test runs ``kai-stream history-sink`` as a separate process (the embedded Tansu broker over TCP), so
the kill is a real one: no ``finally`` runs, the open segment is gone and only what was committed survives.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import polars as pl
from aiokafka import TopicPartition

from kai_stream.core.events import (
    BindFailed,
    BindRequested,
    DeadLetter,
    Model,
    PodBound,
    PodEvicted,
    Tick,
    dumps,
)
from kai_stream.history.schema import HISTORY_SCHEMA
from kai_stream.history.sink import run_sink
from kai_stream.kafka import make_consumer, make_producer
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames

SEGMENT = 4  # rows per segment of the sink under test; each open segment below stays smaller
TIMEOUT_S = 30.0

Key = tuple[str, int, int]  # (topic, partition, offset)


def _archive(directory: Path) -> pl.DataFrame:
    """Every row of every flushed segment (hidden ``.partial`` temp files are not segments)."""
    files = sorted(directory.glob("**/*.parquet"))
    if not files:
        return pl.DataFrame(schema=HISTORY_SCHEMA)
    return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")


def _keys(frame: pl.DataFrame) -> list[Key]:
    return list(zip(frame["topic"].to_list(), frame["partition"].to_list(), frame["offset"].to_list(), strict=True))


async def _until(what: str, check: Callable[[], bool], proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``check`` until it holds; fail after ``TIMEOUT_S`` or as soon as the sink process has died."""
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the sink exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _produce(settings: KafkaSettings, records: Sequence[tuple[str, int, Model]]) -> list[Key]:
    """Send (topic, partition, event) in order, each acknowledged before the next; return where each landed."""
    producer = make_producer(settings)
    await producer.start()
    try:
        out = []
        for topic, partition, event in records:
            meta = await producer.send_and_wait(topic, dumps(event), key=b"k", partition=partition)
            out.append((topic, meta.partition, meta.offset))
        return out
    finally:
        await producer.stop()


async def _committed(settings: KafkaSettings, group: str, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    """The group's committed offsets, read without joining it (-1 where none)."""
    consumer = make_consumer(settings, group_id=group)
    await consumer.start()
    try:
        return {tp: (await consumer.committed(tp)) or -1 for tp in tps}
    finally:
        await consumer.stop()


def _decision(i: int) -> BindRequested:
    return BindRequested(
        decision_id=f"d{i}",
        ts=float(i),
        input_offset=i,
        config_hash="c",
        code_version="t",
        action="allocate",
        namespace="ns",
        name=f"p{i}",
        uid=f"u{i}",
        job="ns/g",
        queue="q",
        node="n1",
    )


def _bound(i: int) -> PodBound:
    return PodBound(
        event_id=f"b{i}", ts=float(i), decision_id=f"d{i}", namespace="ns", name=f"p{i}", uid=f"u{i}", node="n1"
    )


def _dead(i: int) -> DeadLetter:
    return DeadLetter.from_raw(
        topic="cluster-events", partition=0, offset=i, key=b"a", value=b"{bad", reason="malformed", ts=float(i)
    )


def _batch(names: TopicNames, start: int, n: int) -> list[tuple[str, int, Model]]:
    """``n`` records on partition 0 of each of the four topics, interleaved."""
    out: list[tuple[str, int, Model]] = []
    for i in range(start, start + n):
        out += [
            (names.cluster_events, 0, Tick(event_id=f"t{i}", ts=float(i))),
            (names.decisions, 0, _decision(i)),
            (names.bind_results, 0, _bound(i)),
            (names.dead_letter, 0, _dead(i)),
        ]
    return out


def _start_sink(
    settings: KafkaSettings, prefix: str, directory: Path, group: str, log: IO[bytes]
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "KAI_STREAM_KAFKA_SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
        "KAI_STREAM_KAFKA_HEARTBEAT_INTERVAL_MS": str(settings.heartbeat_interval_ms),
    }
    args = [
        "history-sink",
        "--dir", str(directory),
        "--topic-prefix", prefix,
        "--group-id", group,
        "--segment-records", str(SEGMENT),
        "--segment-seconds", "3600",  # a segment is flushed by size or on stop only: the open one stays open
    ]  # fmt: skip
    code = "import sys; from kai_stream.cli import main; sys.argv[0] = 'kai-stream'; main()"
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=log, stderr=subprocess.STDOUT)


async def test_sigkill_with_open_segment_loses_nothing_and_duplicates_nothing(
    kafka_settings: KafkaSettings, topics: TopicNames, topic_prefix: str, tmp_path: Path
) -> None:
    settings, names = kafka_settings, topics
    directory, group = tmp_path / "history", f"{topic_prefix}sink"
    four = [names.cluster_events, names.decisions, names.bind_results, names.dead_letter]
    log = (tmp_path / "sink.log").open("wb")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # 1. SEGMENT + 1 records per topic: each partition's first segment is flushed (and committed)
        flushed = await _produce(settings, _batch(names, 0, SEGMENT + 1))
        procs.append(_start_sink(settings, topic_prefix, directory, group, log))
        await _until("the first segments", lambda: set(flushed) <= set(_keys(_archive(directory))), procs[-1])

        # 2. fewer than SEGMENT records per topic (open segments), then a full segment on another partition;
        # that one is flushed only after a fetch that came after the open records were acknowledged
        open_ = await _produce(settings, _batch(names, SEGMENT + 1, SEGMENT - 1))
        sentinel = await _produce(
            settings, [(names.cluster_events, 1, Tick(event_id=f"s{i}", ts=0.0)) for i in range(SEGMENT)]
        )
        await _until("the sentinel segment", lambda: set(sentinel) <= set(_keys(_archive(directory))), procs[-1])
        assert not set(open_) & set(_keys(_archive(directory))), "the open segments were flushed before the kill"

        procs[-1].send_signal(signal.SIGKILL)
        assert procs[-1].wait(timeout=TIMEOUT_S) == -signal.SIGKILL

        # offsets are committed after a flush only: the killed open segments' records are not committed
        committed = await _committed(settings, group, [TopicPartition(t, 0) for t in four])
        assert committed == {TopicPartition(t, 0): SEGMENT + 1 for t in four}

        # 3. more records while the sink is down, then a restart in the same group until it has caught up
        later = await _produce(settings, _batch(names, 2 * SEGMENT, SEGMENT))  # a full segment by itself
        expected = flushed + open_ + sentinel + later
        procs.append(_start_sink(settings, topic_prefix, directory, group, log))
        # each partition is archived in offset order: once the newest records are in, the sink has caught up
        await _until("the restart to catch up", lambda: set(later) <= set(_keys(_archive(directory))), procs[-1])
        procs[-1].send_signal(signal.SIGTERM)  # a clean stop flushes whatever it still holds
        assert procs[-1].wait(timeout=TIMEOUT_S) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log.close()

    frame = _archive(directory)
    keys = _keys(frame)
    duplicated = sorted({k for k in keys if keys.count(k) > 1})
    assert not duplicated, f"archived more than once: {duplicated}"
    lost = sorted(set(expected) - set(keys))
    assert not lost, f"never archived: {lost}"
    assert sorted(keys) == sorted(expected)
    assert frame.filter(pl.col("type") == "Malformed").height == 0
    assert set(frame["topic"]) == set(four)


async def test_bind_results_and_dead_letters_archived_with_place_and_timestamps(
    kafka_settings: KafkaSettings, topics: TopicNames, tmp_path: Path
) -> None:
    settings, names = kafka_settings, topics
    base_ms = 1_700_000_000_000
    outcome = {"namespace": "ns", "name": "p2", "uid": "u2"}
    events: list[tuple[str, int, Model]] = [
        (names.bind_results, 3, _bound(1)),
        (names.bind_results, 3, BindFailed(event_id="f2", ts=2.5, decision_id="d2", node="n1", error="x", **outcome)),
        (names.bind_results, 5, PodEvicted(event_id="e3", ts=3.0, decision_id="d3", **outcome)),
        (names.dead_letter, 0, _dead(4)),
        (names.dead_letter, 0, _dead(5)),
    ]
    producer = make_producer(settings)
    await producer.start()
    sent: dict[Key, tuple[Model, int]] = {}
    try:
        for i, (topic, partition, event) in enumerate(events):
            meta = await producer.send_and_wait(topic, dumps(event), partition=partition, timestamp_ms=base_ms + i)
            sent[(topic, meta.partition, meta.offset)] = (event, base_ms + i)
    finally:
        await producer.stop()

    directory = tmp_path / "history"
    stop = asyncio.Event()
    task = asyncio.create_task(  # every topic, as the CLI runs it
        run_sink(
            settings,
            directory,
            stop_event=stop,
            names=names,
            group_id=f"{names.decisions}-sink",
            segment_records=2,
            segment_seconds=0.2,
            poll_ms=50,
        )
    )
    try:
        await _until("bind results and dead letters", lambda: set(sent) <= set(_keys(_archive(directory))))
    finally:
        stop.set()
        stats = await asyncio.wait_for(task, TIMEOUT_S)

    frame = _archive(directory)
    assert frame.height == len(sent) == stats.rows
    for row in frame.iter_rows(named=True):
        event, record_ts = sent[(row["topic"], row["partition"], row["offset"])]
        assert row["type"] == event.type  # type: ignore[attr-defined]
        assert row["id"] == event.event_id  # type: ignore[attr-defined]
        assert row["ts"] == event.ts  # type: ignore[attr-defined]
        assert row["record_ts"] == record_ts
        assert row["value"] == dumps(event).decode()
    # laid out under the logical topic name and the partition
    logical = {names.bind_results: "bind-results", names.dead_letter: "dead-letter"}
    for topic, partition, offset in sent:
        folder = directory / logical[topic] / str(partition)
        assert any(
            int(p.stem.split("-")[0]) <= offset <= int(p.stem.split("-")[1]) for p in folder.glob("*.parquet")
        ), (topic, partition, offset)
    bound = frame.filter(pl.col("type") == "PodBound").row(0, named=True)
    assert (bound["uid"], bound["node"], bound["namespace"]) == ("u1", "n1", "ns")
