"""The one row layout of the Parquet history, shared by the live sink and the trace simulator.

A row is one record of one topic: where it was (topic, partition, offset), what it was (type, id, event
time), the columns analytics filter on (pool, namespace, name, uid, queue, node, action, code, gpu_milli),
and the canonical JSON of the whole event (``value``) from which replay rebuilds it byte for byte.
``record_ts`` is the Kafka record timestamp (ms) when the row came from the broker, else null; a record that
does not decode is kept with type ``Malformed`` and its raw text as ``value``.

Typed copies of fields that analytics needs on bulk rows, so a summary never parses ``value`` for them (added
after the first layout; segments written before have no such columns, read them as null — see
``HISTORY_V2_COLUMNS``): ``phase`` (``PodObserved``: the pod's phase), ``job`` (decisions: the pod group),
``preemptor`` (``EvictionRequested``: the job that caused it) and ``shares`` (``FairShareRecorded``: per queue,
GPU fair share and deserved in milli-devices; a trace run writes one such row per changed cycle, ~1 KB of JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from kai_stream.core.events import (
    BindRequested,
    ConfigRecorded,
    DeadLetter,
    DecisionBase,
    EvictionRequested,
    FairShareRecorded,
    Model,
    ObservedBase,
    OutcomeBase,
    PodObserved,
    PodPending,
    PodPipelined,
    PodRemoved,
    dumps,
)

HISTORY_SCHEMA: dict[str, Any] = {
    "topic": pl.Utf8,
    "partition": pl.Int32,
    "offset": pl.Int64,
    "ts": pl.Float64,
    "type": pl.Utf8,
    "id": pl.Utf8,
    "pool": pl.Utf8,
    "namespace": pl.Utf8,
    "name": pl.Utf8,
    "uid": pl.Utf8,
    "queue": pl.Utf8,
    "node": pl.Utf8,
    "action": pl.Utf8,
    "code": pl.Utf8,
    "gpu_milli": pl.Int64,
    "value": pl.Utf8,
    "record_ts": pl.Int64,
    "phase": pl.Utf8,
    "job": pl.Utf8,
    "preemptor": pl.Utf8,
    "shares": pl.List(pl.Struct({"queue": pl.Utf8, "fair_gpu_milli": pl.Int64, "deserved_gpu_milli": pl.Int64})),
}
HISTORY_V2_COLUMNS = ("phase", "job", "preemptor", "shares")


def event_row(
    topic: str, partition: int, offset: int, event: Model, record_ts: int | None = None
) -> dict[str, Any]:
    """The history row of one event, decision or outcome."""
    row: dict[str, Any] = dict.fromkeys(HISTORY_SCHEMA)
    row.update(topic=topic, partition=partition, offset=offset, value=dumps(event).decode(), record_ts=record_ts)
    row["type"] = getattr(event, "type", type(event).__name__)
    row["ts"] = float(getattr(event, "ts", 0.0))
    row["pool"] = getattr(event, "pool", None)
    if isinstance(event, ObservedBase | OutcomeBase):
        row["id"] = event.event_id
    if isinstance(event, DecisionBase):
        row.update(
            id=event.decision_id,
            namespace=event.namespace,
            name=event.name,
            uid=event.uid,
            queue=event.queue,
            action=event.action,
            job=event.job,
        )
        if isinstance(event, BindRequested | PodPipelined | EvictionRequested):
            row["node"] = event.node
        if isinstance(event, EvictionRequested):
            row["preemptor"] = event.preemptor
        if isinstance(event, PodPending):
            row["code"] = event.code
    elif isinstance(event, OutcomeBase):
        row.update(namespace=event.namespace, name=event.name, uid=event.uid)
        row["node"] = getattr(event, "node", None)
    elif isinstance(event, PodObserved):
        pod = event.pod
        row.update(
            namespace=pod.namespace,
            name=pod.name,
            uid=pod.uid,
            queue=pod.queue,
            node=pod.node_name,
            gpu_milli=pod.requests.gpu_milli,
            phase=pod.phase,
        )
    elif isinstance(event, PodRemoved):
        row.update(namespace=event.namespace, name=event.name, uid=event.uid)
    elif isinstance(event, FairShareRecorded):
        row["shares"] = [
            {"queue": q.queue, "fair_gpu_milli": q.fair_share.gpu_milli, "deserved_gpu_milli": q.deserved.gpu_milli}
            for q in event.queues
        ]
    elif isinstance(event, ConfigRecorded):
        row["id"] = event.config_hash
    elif isinstance(event, DeadLetter):
        row["id"] = event.event_id
    return row


def malformed_row(
    topic: str, partition: int, offset: int, raw: bytes | None, record_ts: int | None = None
) -> dict[str, Any]:
    """The history row of a record that does not decode: kept, typed ``Malformed``, raw text as value."""
    row: dict[str, Any] = dict.fromkeys(HISTORY_SCHEMA)
    row.update(
        topic=topic,
        partition=partition,
        offset=offset,
        type="Malformed",
        ts=(record_ts or 0) / 1000.0,
        value=(raw or b"").decode("utf-8", "replace"),
        record_ts=record_ts,
    )
    return row


def rows_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=HISTORY_SCHEMA, orient="row")


def write_segment(rows: list[dict[str, Any]], directory: Path, name: str) -> Path:
    """Write rows as one Parquet segment atomically (temp file, then rename); return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{name}.parquet"
    partial = directory / f".{name}.parquet.partial"
    rows_frame(rows).write_parquet(partial)
    partial.replace(final)
    return final


def scan_history(directory: Path) -> pl.LazyFrame:
    """A lazy scan over every segment under ``directory``."""
    return pl.scan_parquet(str(directory / "**" / "*.parquet"), schema=HISTORY_SCHEMA, missing_columns="insert")
