"""The history sink: a consumer group that archives every topic to Parquet segments, without duplicates.

Layout: ``DIR/<topic>/<partition>/<first offset>-<last offset>.parquet`` (offsets zero-padded, so names
sort in offset order); ``<topic>`` is the logical name (``cluster-events`` …) whatever prefix the deployment's
``TopicNames`` adds, while the ``topic`` column keeps the actual name. Rules:

1. A segment is written to a hidden temp file and renamed into place (``schema.write_segment``): a crash
   loses at most the open (unwritten) segment.
2. A partition's offset is committed only after the segment holding it is durable on disk.
3. On assignment a partition resumes at ``max(committed offset, last segment's last offset + 1)``, and
   records at or below the last archived offset are dropped, so a crash between rename and commit (or a
   group that lost its offsets) never duplicates a row.
4. A segment is flushed when it holds ``segment_records`` rows or its oldest row is ``segment_seconds``
   old, on revocation of its partition, and on stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError

from kai_stream.core.events import (
    CLUSTER_EVENT,
    DECISIONS_RECORD,
    DeadLetter,
    Model,
)
from kai_stream.history.reader import (
    ALL_TOPICS,
    BIND_RESULTS_TOPIC,
    CLUSTER_EVENTS_TOPIC,
    DEAD_LETTER_TOPIC,
    DECISIONS_TOPIC,
    DEFAULT_HISTORY_DIR,
)
from kai_stream.history.schema import event_row, malformed_row, write_segment
from kai_stream.kafka import Record, make_consumer
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames

__all__ = ["DEFAULT_HISTORY_DIR", "SinkStats", "last_archived_offset", "record_row", "run_sink", "segment_name"]

_SEGMENT = re.compile(r"^(\d{20})-(\d{20})\.parquet$")


@dataclass
class SinkStats:
    """What a sink run archived: rows and segments written, malformed rows kept, duplicates dropped."""

    rows: int = 0
    segments: int = 0
    malformed: int = 0
    duplicates: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)


def segment_name(first: int, last: int) -> str:
    return f"{first:020d}-{last:020d}"


def partition_dir(directory: Path, topic: str, partition: int) -> Path:
    return directory / topic / str(partition)


def last_archived_offset(directory: Path, topic: str, partition: int) -> int:
    """The highest offset already in a segment of this partition (-1 when none)."""
    folder = partition_dir(directory, topic, partition)
    if not folder.is_dir():
        return -1
    last = -1
    for path in folder.iterdir():
        match = _SEGMENT.match(path.name)
        if match:
            last = max(last, int(match.group(2)))
    return last


def _decode(topic: str, raw: bytes) -> Model:
    """Decode by logical topic name."""
    if topic == DECISIONS_TOPIC:
        return DECISIONS_RECORD.validate_json(raw)
    if topic in (CLUSTER_EVENTS_TOPIC, BIND_RESULTS_TOPIC):
        return CLUSTER_EVENT.validate_json(raw)
    if topic == DEAD_LETTER_TOPIC:
        return DeadLetter.model_validate_json(raw)
    raise ValueError(f"no schema for topic {topic!r}")


def record_row(record: Record, logical: str | None = None) -> tuple[dict[str, Any], bool]:
    """The history row of one consumed record (``logical``: its topic's unprefixed name), and if malformed."""
    raw = record.value or b""
    try:
        event = _decode(logical or record.topic, raw)
        return event_row(record.topic, record.partition, record.offset, event, record.timestamp), False
    except Exception:  # any record, whatever its bytes, is archived (as Malformed when it must be)
        return malformed_row(record.topic, record.partition, record.offset, raw, record.timestamp), True


@dataclass
class _Open:
    rows: list[dict[str, Any]] = field(default_factory=list)
    opened: float = 0.0


class _Archive:
    """Open segments per partition, flushed to disk and committed in that order."""

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        directory: Path,
        logical: dict[str, str],
        segment_records: int,
        segment_seconds: float,
    ) -> None:
        self.consumer = consumer
        self.logical = logical
        self.directory = directory
        self.segment_records = segment_records
        self.segment_seconds = segment_seconds
        self.open: dict[TopicPartition, _Open] = {}
        self.archived: dict[TopicPartition, int] = {}
        self.stats = SinkStats()

    def last(self, tp: TopicPartition) -> int:
        if tp not in self.archived:
            self.archived[tp] = last_archived_offset(self.directory, self.logical[tp.topic], tp.partition)
        return self.archived[tp]

    def add(self, tp: TopicPartition, records: Sequence[Record]) -> None:
        last = self.last(tp)
        segment = self.open.get(tp)
        for record in records:
            newest = segment.rows[-1]["offset"] if segment is not None and segment.rows else last
            if record.offset <= max(last, newest):
                self.stats.duplicates += 1
                continue
            if segment is None:
                segment = self.open[tp] = _Open(opened=time.monotonic())
            row, bad = record_row(record, self.logical[tp.topic])
            self.stats.malformed += bad
            segment.rows.append(row)

    def due(self, now: float) -> list[TopicPartition]:
        return [
            tp
            for tp, seg in sorted(self.open.items())
            if seg.rows and (len(seg.rows) >= self.segment_records or now - seg.opened >= self.segment_seconds)
        ]

    async def flush(self, tps: Sequence[TopicPartition], *, commit: bool = True) -> None:
        offsets: dict[TopicPartition, int] = {}
        for tp in tps:
            segment = self.open.pop(tp, None)
            if segment is None or not segment.rows:
                continue
            first, last = segment.rows[0]["offset"], segment.rows[-1]["offset"]
            folder = partition_dir(self.directory, self.logical[tp.topic], tp.partition)
            await asyncio.to_thread(write_segment, segment.rows, folder, segment_name(first, last))
            self.archived[tp] = last
            self.stats.rows += len(segment.rows)
            self.stats.segments += 1
            self.stats.per_topic[tp.topic] = self.stats.per_topic.get(tp.topic, 0) + len(segment.rows)
            offsets[tp] = last + 1
        if commit and offsets:
            with contextlib.suppress(KafkaError):  # the archive itself is the resume point (rule 3)
                await self.consumer.commit(offsets)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Flush and commit what is open on revocation; resume after the archive on assignment."""

    def __init__(self) -> None:
        self.archive: _Archive | None = None

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if self.archive is not None:
            await self.archive.flush(sorted(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        archive = self.archive
        if archive is None:
            return
        for tp in sorted(assigned):
            archive.archived.pop(tp, None)
            last = archive.last(tp)
            committed = await archive.consumer.committed(tp)
            resume = max(last + 1, committed or 0)
            if resume > 0:
                archive.consumer.seek(tp, resume)


async def run_sink(
    settings: KafkaSettings,
    directory: str | Path = DEFAULT_HISTORY_DIR,
    topics: Sequence[str] = ALL_TOPICS,
    stop_event: asyncio.Event | None = None,
    *,
    names: TopicNames | None = None,
    group_id: str = "kai-stream-history-sink",
    segment_records: int = 10_000,
    segment_seconds: float = 5.0,
    poll_ms: int = 200,
) -> SinkStats:
    """Archive ``topics`` (logical names) under ``directory`` until ``stop_event`` is set, then flush and commit."""
    stop = stop_event or asyncio.Event()
    resolved = names or TopicNames()
    logical = {resolved.resolve(topic): topic for topic in topics}
    listener = _Listener()
    consumer = make_consumer(settings, *sorted(logical), group_id=group_id, listener=listener)
    archive = _Archive(consumer, Path(directory), logical, segment_records, segment_seconds)
    listener.archive = archive
    await consumer.start()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=poll_ms)
            for tp in sorted(batches):
                archive.add(tp, batches[tp])
            due = archive.due(time.monotonic())
            if due:
                await archive.flush(due)
        await archive.flush(sorted(archive.open))
    finally:
        await consumer.stop()
    return archive.stats
