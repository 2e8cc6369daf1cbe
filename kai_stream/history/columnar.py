"""Fast decoding of a Parquet history's cluster-events, by column: the same events the validator makes.

Most of a long log is ticks and NVML readings that repeat the node's last one. Here:

* a ``Tick`` row whose ``value`` is in canonical form (``{"event_id":…,"pool":…,"ts":…,"type":"Tick","v":1}``,
  strings without escapes, a plain JSON number) is decoded from the regex's groups, vectorised;
* a ``GpuHealthObserved`` row is split into its ``event_id``, its ``ts`` and the rest (the *reading*); each
  distinct reading is validated once, in full, from one of its rows, and must give back that row's id and
  time; the others are that event with their own id and time;
* every other row (and any row the two paths above refuse) goes through the pydantic validator.

The ``type`` column only picks which path to try; what is decoded is always ``value``.

For replay, a pool's log can keep its *time-only* events as columns (``TimeOnly``): those whose fold changes
nothing but ``state.offset`` and ``state.now`` (the largest event time seen): ticks, and GPU readings equal
to the same node's previous reading in that log when the log removes no node (so the node's recorded GPUs
already are that reading). ``TimeOnly.event(i)`` builds the i-th event on demand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl
from pydantic import TypeAdapter, ValidationError

from kai_stream.core.events import CLUSTER_EVENT, ClusterEvent, GpuHealthObserved, NodeRemoved, Tick
from kai_stream.core.gcpause import paused_gc

__all__ = ["ColumnarEvents", "TimeOnly", "decode_columns", "split_pool"]

MATERIAL, TICK, READING = 0, 1, 2

_STR = r'[^"\\\x00-\x1f]*'
_NUM = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,2})?"
_TICK = rf'^\{{"event_id":"(?P<id>{_STR})","pool":"(?P<pool>{_STR})","ts":(?P<ts>{_NUM}),"type":"Tick","v":1\}}$'
_HEALTH_PREFIX = '{"event_id":"'
_HEALTH_GPUS = '","gpus":'
_HEALTH_TS = ',"ts":'
_HEALTH_TYPE = ',"type":"GpuHealthObserved",'

_EVENTS_LIST: TypeAdapter[list[ClusterEvent]] = TypeAdapter(list[ClusterEvent])


def _validate_many(values: Sequence[str]) -> list[ClusterEvent | None]:
    """Decode values in one validator call (one by one when some do not validate); None marks a bad one."""
    if not values:
        return []
    try:
        return list(_EVENTS_LIST.validate_json("[" + ",".join(values) + "]"))
    except ValidationError:
        pass
    out: list[ClusterEvent | None] = []
    for value in values:
        try:
            out.append(CLUSTER_EVENT.validate_json(value))
        except ValidationError:
            out.append(None)
    return out


@dataclass
class ColumnarEvents:
    """Decoded cluster-events rows, in (partition, offset) order.

    ``rows`` has columns partition, offset, kind (MATERIAL / TICK / READING), ref (index into ``material``,
    ``ticks`` or ``readings``), pool, ts (ticks and readings), key and node (readings), and removes_node (a
    material ``NodeRemoved``). ``ticks`` has id, pool, ts; ``readings`` has id, ts and key (the index of its
    template in ``templates``). Malformed rows are dropped (``malformed`` counts them).
    """

    rows: pl.DataFrame
    material: list[ClusterEvent]
    ticks: pl.DataFrame
    readings: pl.DataFrame
    templates: list[GpuHealthObserved]
    malformed: int

    def maker(self, bulk: bool) -> Callable[[int, int], ClusterEvent]:
        """``make(kind, ref)``: the event of one row, as the validator would make it from the row's value.
        ``bulk``: many rows will be made (columns are turned into lists once), else a few (read in place)."""
        material, templates = self.material, self.templates
        tick_id, tick_pool, reading_id = self.ticks["id"], self.ticks["pool"], self.readings["id"]
        tick_ts, reading_ts = self.ticks["ts"].to_numpy(), self.readings["ts"].to_numpy()
        reading_key = self.readings["key"].to_numpy()
        ids: list[str] | pl.Series = tick_id.to_list() if bulk else tick_id
        pools: list[str] | pl.Series = tick_pool.to_list() if bulk else tick_pool
        readings: list[str] | pl.Series = reading_id.to_list() if bulk else reading_id

        def make(kind: int, ref: int) -> ClusterEvent:
            if kind == MATERIAL:
                return material[ref]
            if kind == TICK:
                return Tick(event_id=ids[ref], ts=float(tick_ts[ref]), pool=pools[ref], v=1, type="Tick")
            template = templates[int(reading_key[ref])]
            return template.model_copy(update={"event_id": readings[ref], "ts": float(reading_ts[ref])})

        return make


def _ticks(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows (row, id, pool, ts) of canonical ticks."""
    return (
        frame.filter(pl.col("type") == "Tick")
        .select("row", "partition", "offset", pl.col("value").str.extract_groups(_TICK).alias("m"))
        .unnest("m")
        .with_columns(pl.col("ts").cast(pl.Float64, strict=False))
        .drop_nulls(["id", "pool", "ts"])
    )


def _readings(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[GpuHealthObserved]]:
    """Rows (row, id, ts, key, pool, node) of GPU readings decoded through their reading's template."""
    value = pl.col("value")
    gpus_at, ts_at, type_at = pl.col("a"), pl.col("b"), pl.col("c")
    split = (
        frame.filter(pl.col("type") == "GpuHealthObserved")
        .select(
            "row",
            "partition",
            "offset",
            "value",
            a=value.str.find(_HEALTH_GPUS, literal=True),
            b=value.str.find(_HEALTH_TS, literal=True),
            c=value.str.find(_HEALTH_TYPE, literal=True),
        )
        .filter(value.str.starts_with(_HEALTH_PREFIX) & (gpus_at < ts_at) & (ts_at < type_at))
        .select(
            "row",
            "partition",
            "offset",
            "value",
            id=value.str.slice(len(_HEALTH_PREFIX), gpus_at - len(_HEALTH_PREFIX)),
            ts_text=value.str.slice(ts_at + len(_HEALTH_TS), type_at - ts_at - len(_HEALTH_TS)),
            reading=pl.concat_str(
                value.str.slice(gpus_at + 2, ts_at - gpus_at - 2), value.str.slice(type_at + 1), separator="\x00"
            ),
        )
        .filter(pl.col("id").str.contains(f"^{_STR}$") & pl.col("ts_text").str.contains(f"^{_NUM}$"))
        .with_columns(ts=pl.col("ts_text").cast(pl.Float64, strict=False))
        .drop_nulls("ts")
        .with_columns(key=pl.col("reading").cast(pl.Categorical).to_physical().cast(pl.Int64))
    )
    if split.height == 0:
        empty = split.select("row", "partition", "offset", "id", "ts", "key")
        return empty.with_columns(pool=pl.lit("", pl.Utf8), node=pl.lit("", pl.Utf8)), []
    firsts = split.group_by("key").agg(pl.col("value").first(), pl.col("id").first(), pl.col("ts").first())
    templates: list[GpuHealthObserved] = []
    keep: list[tuple[int, int, str, str]] = []
    for key, value, event_id, ts in firsts.iter_rows():
        try:
            event = GpuHealthObserved.model_validate_json(value)
        except ValidationError:
            continue
        if event.event_id == event_id and event.ts == ts:
            keep.append((key, len(templates), event.pool, event.node))
            templates.append(event)
    known = pl.DataFrame(
        keep, schema={"key": pl.Int64, "template": pl.Int64, "pool": pl.Utf8, "node": pl.Utf8}, orient="row"
    )
    rows = split.join(known, on="key", how="inner").select(
        "row", "partition", "offset", "id", "ts", pl.col("template").alias("key"), "pool", "node"
    )
    return rows, templates


def decode_columns(frame: pl.DataFrame) -> ColumnarEvents:
    """Decode a cluster-events frame (partition, offset, type, value; sorted by partition and offset)."""
    frame = frame.with_row_index("row")
    ticks = _ticks(frame)
    readings, templates = _readings(frame)
    fast = pl.concat([ticks.select("row"), readings.select("row")])
    rest = frame.join(fast, on="row", how="anti").select("row", "partition", "offset", "value").sort("row")
    with paused_gc():
        decoded = _validate_many(rest["value"].to_list())
    kept = pl.Series([event is not None for event in decoded], dtype=pl.Boolean)
    material = [event for event in decoded if event is not None]
    material_rows = rest.filter(kept).select(
        "row",
        "partition",
        "offset",
        kind=pl.lit(MATERIAL, pl.Int8),
        ref=pl.int_range(pl.len(), dtype=pl.Int64),
        pool=pl.Series([event.pool for event in material], dtype=pl.Utf8),
        removes_node=pl.Series([isinstance(event, NodeRemoved) for event in material], dtype=pl.Boolean),
    )
    tick_rows = ticks.select(
        "row",
        "partition",
        "offset",
        kind=pl.lit(TICK, pl.Int8),
        ref=pl.int_range(pl.len(), dtype=pl.Int64),
        pool="pool",
        ts="ts",
    )
    reading_rows = readings.select(
        "row",
        "partition",
        "offset",
        kind=pl.lit(READING, pl.Int8),
        ref=pl.int_range(pl.len(), dtype=pl.Int64),
        pool="pool",
        ts="ts",
        key="key",
        node="node",
    )
    rows = (
        pl.concat([material_rows, tick_rows, reading_rows], how="diagonal")
        .with_columns(pl.col("removes_node").fill_null(False))
        .sort("row")
        .drop("row")
    )
    return ColumnarEvents(
        rows=rows,
        material=material,
        ticks=ticks.select("id", "pool", "ts"),
        readings=readings.select("id", "ts", "key"),
        templates=templates,
        malformed=len(decoded) - len(material),
    )


@dataclass
class TimeOnly:
    """A pool's time-only events as columns, in offset order (see the module docstring).

    ``peak[i]`` is the last index ``j <= i`` whose ``ts`` is the largest of ``ts[: i + 1]``: folding that one
    event leaves ``state.now`` where folding all of ``0..i`` would. ``event(i)`` builds the i-th event.
    """

    offsets: npt.NDArray[np.int64]
    ts: npt.NDArray[np.float64]
    peak: npt.NDArray[np.int64]
    kinds: npt.NDArray[np.int8]
    refs: npt.NDArray[np.int64]
    make: Callable[[int, int], ClusterEvent]

    def __len__(self) -> int:
        return len(self.offsets)

    def search(self, offset: int, start: int = 0) -> int:
        """The first index at or after ``start`` whose offset is not below ``offset``."""
        return start + int(np.searchsorted(self.offsets[start:], offset, side="left"))

    def event(self, i: int) -> ClusterEvent:
        return self.make(int(self.kinds[i]), int(self.refs[i]))


def split_pool(
    columns: ColumnarEvents, rows: pl.DataFrame, compact: bool
) -> tuple[list[int], list[ClusterEvent], TimeOnly | None]:
    """One pool's rows (offset order) as (offsets, events, time-only); everything in ``events`` unless
    ``compact``."""
    if compact:
        removes = bool(rows["removes_node"].any())
        redundant = (
            (pl.col("kind") == READING) & (pl.col("key") == pl.col("key").shift(1).over("node")) & pl.lit(not removes)
        )
        time_only = (pl.col("kind") == TICK) | redundant.fill_null(False)
        rows = rows.with_columns(time_only=time_only)
    else:
        rows = rows.with_columns(time_only=pl.lit(False))
    material = rows.filter(~pl.col("time_only"))
    make = columns.maker(bulk=not compact)
    with paused_gc():
        events = [
            make(kind, ref) for kind, ref in zip(material["kind"].to_list(), material["ref"].to_list(), strict=True)
        ]
    offsets: list[int] = material["offset"].to_list()
    timed = rows.filter(pl.col("time_only"))
    if timed.height == 0:
        return offsets, events, None
    peak = timed.select(
        pl.when(pl.col("ts") >= pl.col("ts").cum_max()).then(pl.int_range(pl.len(), dtype=pl.Int64)).forward_fill()
    ).to_series()
    return (
        offsets,
        events,
        TimeOnly(
            offsets=timed["offset"].to_numpy(),
            ts=timed["ts"].to_numpy(),
            peak=peak.to_numpy(),
            kinds=timed["kind"].to_numpy(),
            refs=timed["ref"].to_numpy(),
            make=make,
        ),
    )
