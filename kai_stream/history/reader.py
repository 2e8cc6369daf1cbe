"""Read a recorded log back, per node pool and in offset order: from the Parquet history or from the broker.

A pool's log is the cluster-events of its partition (its own events and the cluster-scoped ``pool="*"``
ones, with their offsets) plus its records on the decisions topic (decisions, ``ConfigRecorded``,
``FairShareRecorded``) in topic order. Rows typed ``Malformed`` are counted and skipped.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path

import orjson
import polars as pl
from aiokafka.errors import KafkaError
from pydantic import TypeAdapter, ValidationError

from kai_stream.core.events import (
    ALL_POOLS,
    CLUSTER_EVENT,
    DECISIONS_RECORD,
    ClusterEvent,
    ConfigRecorded,
    Decision,
    DecisionsRecord,
    FairShareRecorded,
    GpuHealthObserved,
    Tick,
)
from kai_stream.core.gcpause import paused_gc
from kai_stream.history.columnar import ColumnarEvents, TimeOnly, decode_columns, split_pool
from kai_stream.history.schema import HISTORY_SCHEMA
from kai_stream.kafka import partition_for, read_topic
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames

__all__ = [
    "ALL_TOPICS",
    "BIND_RESULTS_TOPIC",
    "CLUSTER_EVENTS_TOPIC",
    "DEAD_LETTER_TOPIC",
    "DECISIONS_TOPIC",
    "DEFAULT_HISTORY_DIR",
    "NO_HISTORY",
    "SOURCE_ERRORS",
    "History",
    "PoolLog",
    "build_history",
    "decode_cluster_events",
    "decode_decisions_records",
    "default_history",
    "open_history",
    "read_broker",
    "read_history",
]

CLUSTER_EVENTS_TOPIC = "cluster-events"
DECISIONS_TOPIC = "decisions"
BIND_RESULTS_TOPIC = "bind-results"
DEAD_LETTER_TOPIC = "dead-letter"
DEFAULT_HISTORY_DIR = Path(".kai-stream/history")
SOURCE_ERRORS: tuple[type[Exception], ...] = (ValueError, LookupError, TimeoutError, OSError, KafkaError)
"""What ``open_history`` raises for a bad directory, an unreachable broker or a missing topic."""
ALL_TOPICS: tuple[str, ...] = (CLUSTER_EVENTS_TOPIC, DECISIONS_TOPIC, BIND_RESULTS_TOPIC, DEAD_LETTER_TOPIC)

_EVENTS_LIST: TypeAdapter[list[ClusterEvent]] = TypeAdapter(list[ClusterEvent])
_RECORDS_LIST: TypeAdapter[list[DecisionsRecord]] = TypeAdapter(list[DecisionsRecord])

Raw = str | bytes
RawRecord = tuple[int, int, Raw]


class PoolLog:
    """One pool's recorded log: observed events (with offsets) and what the scheduler published.

    Read for replay (``read_history(..., compact=True)``), the time-only events are kept as columns in
    ``time_only`` and ``events``/``offsets`` build the full lists on first use; ``parts()`` gives the pieces
    without building them.
    """

    def __init__(
        self,
        pool: str,
        partition: int | None = None,
        events: list[ClusterEvent] | None = None,
        offsets: list[int] | None = None,
        decisions: list[Decision] | None = None,
        decision_offsets: list[int] | None = None,
        configs: list[ConfigRecorded] | None = None,
        fair_shares: list[FairShareRecorded] | None = None,
        time_only: TimeOnly | None = None,
    ) -> None:
        self.pool = pool
        self.partition = partition
        self._events: list[ClusterEvent] = events if events is not None else []
        self._offsets: list[int] = offsets if offsets is not None else []
        self.decisions: list[Decision] = decisions if decisions is not None else []
        self.decision_offsets: list[int] = decision_offsets if decision_offsets is not None else []
        self.configs: list[ConfigRecorded] = configs if configs is not None else []
        self.fair_shares: list[FairShareRecorded] = fair_shares if fair_shares is not None else []
        self.time_only = time_only

    def __repr__(self) -> str:
        return f"PoolLog(pool={self.pool!r}, events={self.event_count}, decisions={len(self.decisions)})"

    def _expand(self) -> None:
        timed = self.time_only
        if timed is None:
            return
        self.time_only = None
        offsets: list[int] = []
        events: list[ClusterEvent] = []
        timed_offsets: list[int] = timed.offsets.tolist()
        kinds: list[int] = timed.kinds.tolist()
        refs: list[int] = timed.refs.tolist()
        make = timed.make
        count = len(timed_offsets)
        with paused_gc():
            i = 0
            for offset, event in zip(self._offsets, self._events, strict=True):
                while i < count and timed_offsets[i] < offset:
                    offsets.append(timed_offsets[i])
                    events.append(make(kinds[i], refs[i]))
                    i += 1
                offsets.append(offset)
                events.append(event)
            for j in range(i, count):
                offsets.append(timed_offsets[j])
                events.append(make(kinds[j], refs[j]))
        self._offsets, self._events = offsets, events

    @property
    def events(self) -> list[ClusterEvent]:
        self._expand()
        return self._events

    @events.setter
    def events(self, value: list[ClusterEvent]) -> None:
        self._expand()
        self._events = value

    @property
    def offsets(self) -> list[int]:
        self._expand()
        return self._offsets

    @offsets.setter
    def offsets(self, value: list[int]) -> None:
        self._expand()
        self._offsets = value

    @property
    def event_count(self) -> int:
        return len(self._events) + (len(self.time_only) if self.time_only is not None else 0)

    def parts(self) -> tuple[list[int], list[ClusterEvent], TimeOnly | None]:
        """(offsets, events, time-only columns) without building the full lists: ``events`` are the rest."""
        return self._offsets, self._events, self.time_only


@dataclass
class History:
    pools: dict[str, PoolLog]
    source: str
    malformed: int = 0

    @property
    def events(self) -> int:
        return sum(log.event_count for log in self.pools.values())

    @property
    def decisions(self) -> int:
        return sum(len(log.decisions) for log in self.pools.values())


def _joined(values: Sequence[Raw]) -> bytes:
    return b"[" + b",".join(v.encode() if isinstance(v, str) else v for v in values) + b"]"


def _tick(value: bytes) -> Tick | None:
    """A ``Tick`` (the bulk of a live log) validated as that model directly, skipping the union dispatch."""
    if b'"Tick"' not in value:
        return None
    try:
        data = orjson.loads(value)
        return Tick.model_validate(data) if type(data) is dict and data.get("type") == "Tick" else None
    except (orjson.JSONDecodeError, ValidationError):
        return None


_HEALTH_TYPE = b',"type":"GpuHealthObserved"'
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_HEALTH_CACHE_SIZE = 4096


def _health(value: bytes, cache: dict[bytes, GpuHealthObserved]) -> GpuHealthObserved | None:
    """A canonical ``GpuHealthObserved`` decoded once per distinct reading (agents resend the same readings).

    The key is the record's bytes without ``event_id`` and ``ts`` (a bare ``"`` cannot occur inside a JSON
    string, so the top-level keys are found exactly); a hit is the cached event with those two replaced. A
    miss is validated in full and cached only if the extracted id and time agree with the validator's.
    """
    if not value.startswith(b'{"event_id":"'):
        return None
    id_end = value.find(b'","gpus":')
    ts_at = value.find(b',"ts":')
    type_at = value.find(_HEALTH_TYPE)
    if id_end < 0 or not id_end < ts_at < type_at:
        return None
    event_id = value[13:id_end]
    stamp = value[ts_at + 6 : type_at]
    if b"\\" in event_id or b'"' in event_id or _NUMBER.fullmatch(stamp) is None:
        return None
    key = value[id_end + 2 : ts_at] + value[type_at:]
    cached = cache.get(key)
    if cached is not None:
        return cached.model_copy(update={"event_id": event_id.decode(), "ts": float(stamp)})
    try:
        event = GpuHealthObserved.model_validate_json(value)
    except ValidationError:
        return None
    if event.event_id == event_id.decode() and event.ts == float(stamp):
        if len(cache) >= _HEALTH_CACHE_SIZE:
            cache.clear()
        cache[key] = event
    return event


def decode_cluster_events(values: Sequence[Raw]) -> tuple[list[ClusterEvent | None], int]:
    """Decode many cluster-events values (ticks and repeated GPU readings directly, the rest in one parser
    call); None marks a malformed one."""
    health: dict[bytes, GpuHealthObserved] = {}
    out: list[ClusterEvent | None] = []
    for value in values:
        raw = value if isinstance(value, bytes) else value.encode()
        out.append(_tick(raw) or (_health(raw, health) if _HEALTH_TYPE in raw else None))
    rest = [i for i, event in enumerate(out) if event is None]
    if not rest:
        return out, 0
    try:
        decoded: list[ClusterEvent | None] = list(_EVENTS_LIST.validate_json(_joined([values[i] for i in rest])))
    except ValidationError:
        decoded = []
        for i in rest:
            try:
                decoded.append(CLUSTER_EVENT.validate_json(values[i]))
            except ValidationError:
                decoded.append(None)
    for i, event in zip(rest, decoded, strict=True):
        out[i] = event
    return out, sum(1 for event in decoded if event is None)


def decode_decisions_records(values: Sequence[Raw]) -> tuple[list[DecisionsRecord | None], int]:
    """Decode many decisions-topic values at once; None marks a malformed one."""
    try:
        return list(_RECORDS_LIST.validate_json(_joined(values))), 0
    except ValidationError:
        pass
    out: list[DecisionsRecord | None] = []
    for value in values:
        try:
            out.append(DECISIONS_RECORD.validate_json(value))
        except ValidationError:
            out.append(None)
    return out, sum(1 for r in out if r is None)


def build_history(events: Iterable[RawRecord], records: Iterable[RawRecord], source: str) -> History:
    """Group raw (partition, offset, value) records of cluster-events and decisions into pool logs."""
    ev_sorted = sorted(events, key=itemgetter(0, 1))
    rec_sorted = sorted(records, key=itemgetter(0, 1))
    decoded_events, bad_events = decode_cluster_events([r[2] for r in ev_sorted])
    decoded_records, bad_records = decode_decisions_records([r[2] for r in rec_sorted])

    by_partition: dict[int, list[tuple[int, ClusterEvent]]] = defaultdict(list)
    pools_in: dict[int, set[str]] = defaultdict(set)
    for (partition, offset, _), event in zip(ev_sorted, decoded_events, strict=True):
        if event is not None:
            by_partition[partition].append((offset, event))
            pools_in[partition].add(event.pool)
    pool_partitions: dict[str, Counter[int]] = defaultdict(Counter)
    for partition, names in pools_in.items():
        for name in names - {ALL_POOLS}:
            pool_partitions[name][partition] = 0
    for name, spread in pool_partitions.items():
        if len(spread) > 1:
            for partition in spread:
                spread[partition] = sum(1 for _, e in by_partition[partition] if e.pool == name)

    pools: dict[str, PoolLog] = {}
    for (_, offset, _), record in zip(rec_sorted, decoded_records, strict=True):
        if record is None:
            continue
        log = pools.setdefault(record.pool, PoolLog(record.pool))
        if isinstance(record, ConfigRecorded):
            log.configs.append(record)
        elif isinstance(record, FairShareRecorded):
            log.fair_shares.append(record)
        else:
            log.decisions.append(record)
            log.decision_offsets.append(offset)
    for pool in pool_partitions:
        pools.setdefault(pool, PoolLog(pool))

    partitions = len(by_partition) and max(by_partition) + 1
    for pool in sorted(pools):
        log = pools[pool]
        found = pool_partitions.get(pool)
        if found:
            log.partition = min(found, key=lambda p: (-found[p], p))
        elif partitions:
            log.partition = partition_for(pool, partitions)
        for offset, event in by_partition.get(log.partition, []) if log.partition is not None else []:
            if event.pool == pool or event.pool == ALL_POOLS:
                log.events.append(event)
                log.offsets.append(offset)
    return History(pools=dict(sorted(pools.items())), source=source, malformed=bad_events + bad_records)


def _frame_records(frame: pl.DataFrame) -> list[RawRecord]:
    return list(zip(frame["partition"].to_list(), frame["offset"].to_list(), frame["value"].to_list(), strict=True))


def _pool_logs(columns: ColumnarEvents, records: History, compact: bool) -> dict[str, PoolLog]:
    """Route decoded cluster-events rows to pools exactly as ``build_history`` does."""
    rows = columns.rows
    counts: dict[str, Counter[int]] = defaultdict(Counter)
    for pool, partition, count in rows.group_by("pool", "partition").len().iter_rows():
        if pool != ALL_POOLS:
            counts[pool][partition] = count
    pools = dict(records.pools)
    for pool in counts:
        pools.setdefault(pool, PoolLog(pool))
    partitions = rows.height and int(rows["partition"].max()) + 1  # type: ignore[arg-type]
    for pool in sorted(pools):
        log = pools[pool]
        found = counts.get(pool)
        if found:
            log.partition = min(found, key=lambda p: (-found[p], p)) if len(found) > 1 else next(iter(found))
        elif partitions:
            log.partition = partition_for(pool, partitions)
        if log.partition is None:
            continue
        mine = rows.filter((pl.col("partition") == log.partition) & pl.col("pool").is_in([pool, ALL_POOLS]))
        log._offsets, log._events, log.time_only = split_pool(columns, mine, compact)
    return dict(sorted(pools.items()))


def _segments_frame(root: Path, topic: str) -> tuple[pl.DataFrame, int]:
    """One topic's rows (partition, offset, type, value) in (partition, offset) order, the first copy of a
    duplicated (partition, offset) kept; and how many rows are typed ``Malformed``."""
    files = sorted((root / topic).glob("**/*.parquet")) if (root / topic).is_dir() else []
    if not files:
        return pl.DataFrame(schema=HISTORY_SCHEMA).select("partition", "offset", "type", "value"), 0
    frame = (
        pl.scan_parquet([str(f) for f in files], schema=HISTORY_SCHEMA, missing_columns="insert")
        .select("partition", "offset", "type", "value")
        .with_row_index("row")
        .sort("partition", "offset", "row")
        .filter(
            ((pl.col("partition") != pl.col("partition").shift(1)) | (pl.col("offset") != pl.col("offset").shift(1)))
            .fill_null(True)
        )
        .drop("row")
        .collect()
    )
    bad = frame["type"] == "Malformed"
    return frame.filter(~bad), int(bad.sum())


def read_history(directory: str | Path, *, compact: bool = True) -> History:
    """Load cluster-events and decisions from the Parquet history under ``directory``.

    ``compact``: keep each pool's time-only events as columns (``PoolLog.time_only``) until its ``events``
    are used; replay folds them without building them.
    """
    root = Path(directory)
    events, bad_events = _segments_frame(root, CLUSTER_EVENTS_TOPIC)
    records, bad_records = _segments_frame(root, DECISIONS_TOPIC)
    if not events.height and not records.height:
        raise FileNotFoundError(f"no history segments for {CLUSTER_EVENTS_TOPIC!r} or {DECISIONS_TOPIC!r} under {root}")
    published = build_history([], _frame_records(records), str(root))
    columns = decode_columns(events)
    history = History(
        pools=_pool_logs(columns, published, compact),
        source=str(root),
        malformed=published.malformed + columns.malformed + bad_events + bad_records,
    )
    return history


async def read_broker(
    settings: KafkaSettings, names: TopicNames | None = None, *, timeout_s: float = 60.0
) -> History:
    """Load cluster-events and decisions from the broker, every partition up to its high-watermark."""
    topics = names or TopicNames()
    events = await read_topic(settings, topics.cluster_events, timeout_s=timeout_s)
    try:
        records = await read_topic(settings, topics.decisions, timeout_s=timeout_s)
    except LookupError:
        records = []
    return build_history(
        [(r.partition, r.offset, r.value or b"") for r in events],
        [(r.partition, r.offset, r.value or b"") for r in records],
        settings.bootstrap_servers,
    )


NO_HISTORY = (
    f"no history at {DEFAULT_HISTORY_DIR} and no broker named: run `kai-stream run` here first (it records one), "
    "or pass --from-history DIR or --bootstrap-servers HOST:PORT"
)


def default_history() -> Path | None:
    """The default history dir when it exists; None when the environment names a broker to read instead.
    ``LookupError`` (``NO_HISTORY``) when there is neither."""
    if DEFAULT_HISTORY_DIR.is_dir():
        return DEFAULT_HISTORY_DIR
    if os.environ.get("KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS"):
        return None
    raise LookupError(NO_HISTORY)


def open_history(
    from_history: str | Path | None = None,
    *,
    bootstrap_servers: str | None = None,
    topic_prefix: str = "",
    timeout_s: float = 60.0,
) -> History:
    """The log a command should read: ``from_history``; else the broker ``bootstrap_servers`` names; else the
    default history dir (what ``kai-stream run`` writes) when it exists; else the broker the environment names
    (``KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS``). ``LookupError`` when none of them is there."""
    if from_history is not None:
        return read_history(from_history)
    if bootstrap_servers is None:
        default = default_history()
        if default is not None:
            return read_history(default)
    settings = KafkaSettings.for_servers(bootstrap_servers)
    return asyncio.run(read_broker(settings, TopicNames.with_prefix(topic_prefix), timeout_s=timeout_s))
