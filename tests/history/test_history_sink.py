"""The history sink on the real broker: every record archived once, restart resumes without duplicates."""

from __future__ import annotations

import asyncio
from pathlib import Path

import polars as pl

from kai_stream.core.events import NodeObserved, NodeSpec, Tick, dumps
from kai_stream.history.reader import CLUSTER_EVENTS_TOPIC, DEAD_LETTER_TOPIC, read_history
from kai_stream.history.schema import scan_history
from kai_stream.history.sink import run_sink
from kai_stream.kafka import make_producer, send_keyed
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames


async def _produce(settings: KafkaSettings, topic: str, values: list[tuple[str, bytes]]) -> None:
    producer = make_producer(settings)
    await producer.start()
    try:
        for pool, value in values:
            await (await send_keyed(producer, topic, pool, value))
    finally:
        await producer.stop()


async def _sink_until(settings: KafkaSettings, names: TopicNames, directory: Path, rows: int, group: str) -> int:
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_sink(
            settings,
            directory,
            [CLUSTER_EVENTS_TOPIC, DEAD_LETTER_TOPIC],
            stop,
            names=names,
            group_id=group,
            segment_records=7,
            segment_seconds=0.2,
            poll_ms=50,
        )
    )
    for _ in range(200):
        await asyncio.sleep(0.05)
        files = list(directory.glob("**/*.parquet"))
        if files and pl.read_parquet(files, columns=["offset"]).height >= rows:
            break
    stop.set()
    return (await asyncio.wait_for(task, 30)).rows


def _events(pool: str, start: int, n: int) -> list[tuple[str, bytes]]:
    out = [(pool, dumps(NodeObserved(event_id=f"{pool}-n", ts=0.0, pool=pool, node=NodeSpec(name="n", pool=pool))))]
    out += [(pool, dumps(Tick(event_id=f"{pool}-{i}", ts=float(i), pool=pool))) for i in range(start, start + n)]
    return out


async def test_sink_round_trip_and_restart_without_duplicates(
    kafka_settings: KafkaSettings, topics: TopicNames, tmp_path: Path
) -> None:
    settings = kafka_settings
    first = _events("a", 0, 10) + _events("b", 0, 5) + [("a", b"{not json")]
    await _produce(settings, topics.cluster_events, first)
    assert await _sink_until(settings, topics, tmp_path, len(first), f"{topics.decisions}-sink") == len(first)

    second = _events("a", 10, 8)[1:] + _events("b", 5, 4)[1:]
    await _produce(settings, topics.cluster_events, second)
    # a fresh group (offsets lost) must still resume after the archive: the segment names are the truth
    await _sink_until(settings, topics, tmp_path, len(first) + len(second), f"{topics.decisions}-sink-fresh")

    frame = scan_history(tmp_path).collect()
    assert frame.height == len(first) + len(second)
    assert frame.select(["partition", "offset"]).is_duplicated().sum() == 0
    assert frame.filter(pl.col("type") == "Malformed")["value"].to_list() == ["{not json"]
    assert frame["record_ts"].null_count() == 0

    history = read_history(tmp_path)
    assert history.malformed == 1
    assert [len(history.pools[p].events) for p in ("a", "b")] == [19, 10]
    offsets = history.pools["a"].offsets
    assert offsets == sorted(offsets)
