"""The one row layout of the Parquet history, shared by the live sink and the trace simulator.

A row is one record of one topic: where it was (topic, partition, offset), what it was (type, id, event
time), the columns analytics filter on (pool, namespace, name, uid, queue, node, action, code, gpu_milli),
and the canonical JSON of the whole event (``value``) from which replay rebuilds it byte for byte.
``record_ts`` is the Kafka record timestamp (ms) when the row came from the broker, else null; a record that
does not decode is kept with type ``Malformed`` and its raw text as ``value``.

Typed copies of fields that analytics needs on bulk rows, so a summary never parses ``value`` for them (added
after the first layout; segments written before have no such columns, read them as null — see
``HISTORY_V2_COLUMNS``): ``phase`` (``PodObserved``: the pod's phase), ``job`` (decisions, and ``PodObserved`` of
a pod in a PodGroup: the pod group ``namespace/name``),
``preemptor`` (``EvictionRequested``: the job that caused it) and ``shares`` (``FairShareRecorded``: per queue,
GPU fair share and deserved in milli-devices; a trace run writes one such row per changed cycle, ~1 KB of JSON).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


COLUMNS: tuple[str, ...] = tuple(HISTORY_SCHEMA)

_Typed = tuple[Any, ...]
"""The typed columns of a row: id, namespace, name, uid, queue, node, action, code, gpu_milli, phase, job,
preemptor, shares."""
_UNTYPED: _Typed = (None,) * 13


def _decision_columns(cls: type[DecisionBase]) -> Callable[[Any], _Typed]:
    node = issubclass(cls, BindRequested | PodPipelined | EvictionRequested)
    preemptor = issubclass(cls, EvictionRequested)
    code = issubclass(cls, PodPending)

    def columns(e: Any) -> _Typed:
        return (
            e.decision_id,
            e.namespace,
            e.name,
            e.uid,
            e.queue,
            e.node if node else None,
            e.action,
            e.code if code else None,
            None,
            None,
            e.job,
            e.preemptor if preemptor else None,
            None,
        )

    return columns


def _outcome_columns(e: Any) -> _Typed:
    node = getattr(e, "node", None)
    return (e.event_id, e.namespace, e.name, e.uid, None, node, None, None, None, None, None, None, None)


def _pod_observed_columns(e: PodObserved) -> _Typed:
    pod = e.pod
    return (
        e.event_id,
        pod.namespace,
        pod.name,
        pod.uid,
        pod.queue,
        pod.node_name,
        None,
        None,
        pod.requests.gpu_milli,
        pod.phase,
        f"{pod.namespace}/{pod.pod_group}" if pod.pod_group is not None else None,
        None,
        None,
    )


def _event_id_columns(e: Any) -> _Typed:
    return (e.event_id, *_UNTYPED[1:])


def _config_columns(e: ConfigRecorded) -> _Typed:
    return (e.config_hash, *_UNTYPED[1:])


def _shares_columns(e: FairShareRecorded) -> _Typed:
    shares = [
        {"queue": q.queue, "fair_gpu_milli": q.fair_share.gpu_milli, "deserved_gpu_milli": q.deserved.gpu_milli}
        for q in e.queues
    ]
    return (*_UNTYPED[:12], shares)


def _typed_columns(cls: type) -> Callable[[Any], _Typed]:
    if issubclass(cls, DecisionBase):
        return _decision_columns(cls)
    if issubclass(cls, OutcomeBase | PodRemoved):
        return _outcome_columns
    if issubclass(cls, PodObserved):
        return _pod_observed_columns
    if issubclass(cls, ObservedBase | DeadLetter):
        return _event_id_columns
    if issubclass(cls, FairShareRecorded):
        return _shares_columns
    if issubclass(cls, ConfigRecorded):
        return _config_columns
    return lambda e: _UNTYPED


_TYPED: dict[type, Callable[[Any], _Typed]] = {}


def event_values(
    topic: str, partition: int, offset: int, event: Model, record_ts: int | None = None, value: bytes | None = None
) -> tuple[Any, ...]:
    """``event_row`` as a tuple in ``COLUMNS`` order; ``value``: ``dumps(event)`` when the caller has it."""
    cls = type(event)
    typed = _TYPED.get(cls)
    if typed is None:
        typed = _TYPED[cls] = _typed_columns(cls)
    id_, namespace, name, uid, queue, node, action, code, gpu_milli, phase, job, preemptor, shares = typed(event)
    return (
        topic,
        partition,
        offset,
        float(getattr(event, "ts", 0.0)),
        getattr(event, "type", cls.__name__),
        id_,
        getattr(event, "pool", None),
        namespace,
        name,
        uid,
        queue,
        node,
        action,
        code,
        gpu_milli,
        (dumps(event) if value is None else value).decode(),
        record_ts,
        phase,
        job,
        preemptor,
        shares,
    )


def event_row(
    topic: str, partition: int, offset: int, event: Model, record_ts: int | None = None
) -> dict[str, Any]:
    """The history row of one event, decision or outcome."""
    return dict(zip(COLUMNS, event_values(topic, partition, offset, event, record_ts), strict=True))


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


def _column(name: str, values: Sequence[Any]) -> pl.Series:
    """One column of ``HISTORY_SCHEMA``. ``shares`` is built with its type inferred when that is the column's
    type (three times as fast as converting each list of dicts to it)."""
    dtype = HISTORY_SCHEMA[name]
    if name == "shares":
        inferred = pl.Series(name, values)
        if inferred.dtype == dtype:
            return inferred
    return pl.Series(name, values, dtype=dtype)


def rows_frame(rows: Sequence[dict[str, Any]] | Sequence[tuple[Any, ...]]) -> pl.DataFrame:
    """Rows as ``event_row`` dicts or ``event_values`` tuples (these are taken column by column: the same
    frame, about twice as fast)."""
    if not rows or not isinstance(rows[0], tuple):
        return pl.DataFrame(rows, schema=HISTORY_SCHEMA, orient="row")
    return pl.DataFrame([_column(name, values) for name, values in zip(COLUMNS, zip(*rows, strict=True), strict=True)])


def write_segment(rows: Sequence[dict[str, Any]] | Sequence[tuple[Any, ...]], directory: Path, name: str) -> Path:
    """Write rows (as ``rows_frame`` takes them) as one Parquet segment atomically (temp file, then rename);
    return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{name}.parquet"
    partial = directory / f".{name}.parquet.partial"
    rows_frame(rows).write_parquet(partial)
    partial.replace(final)
    return final


def scan_history(directory: Path) -> pl.LazyFrame:
    """A lazy scan over every segment under ``directory``."""
    return pl.scan_parquet(str(directory / "**" / "*.parquet"), schema=HISTORY_SCHEMA, missing_columns="insert")
