"""Lazy polars frames derived from the Parquet history: pod lifecycles, allocation steps, capacities.

Definitions (what every number in the summary means):

* submit of a pod = first ``PodObserved`` with no node (pending); bind = first ``BindRequested`` or
  ``PodBound``; queueing delay = bind - submit.
* A pod holds its GPUs from ``BindRequested``/``PodBound`` (or a ``PodObserved`` on a node, not finished)
  until ``PodEvicted``, ``BindFailed``, ``PodRemoved`` or a ``PodObserved`` in phase Succeeded/Failed.
  Per pod the state is 1 (holding) or 0; a step of the cluster's allocation is the change of that state times
  the pod's GPU request, so duplicated outcomes (e.g. the same ``PodBound`` on two topics) change nothing.
* A pod finishes at a release that is not an eviction or a failed bind; a job (pod group, from the
  decisions' ``job`` field; else the pod itself) completes when all its pods finished; JCT = last finish -
  first submit.
* Stranded GPUs: the free GPU capacity of nodes that are partly used (0 < used < allocatable).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kai_stream.history.schema import HISTORY_SCHEMA

__all__ = [
    "allocation_steps",
    "lifecycle",
    "node_capacity",
    "pods",
    "scan",
    "step_average",
    "step_sample",
]

RELEASE_TYPES = ("PodEvicted", "BindFailed", "PodRemoved")


def scan(directory: str | Path) -> pl.LazyFrame:
    """Every history segment under ``directory`` (any topic layout), minus the dead-letter topic."""
    root = Path(directory)
    files = sorted(str(p) for p in root.glob("**/*.parquet"))
    if not files:
        raise FileNotFoundError(f"no history segments (*.parquet) under {root}")
    lf = pl.scan_parquet(files, schema=HISTORY_SCHEMA, missing_columns="insert")
    return lf.filter(pl.col("topic") != "dead-letter")


def node_capacity(lf: pl.LazyFrame) -> pl.LazyFrame:
    """node -> allocatable GPU milli-devices (last ``NodeObserved`` of each node)."""
    return (
        lf.filter(pl.col("type") == "NodeObserved")
        .select("ts", "offset", "value")
        .with_columns(
            node=pl.col("value").str.json_path_match("$.node.name"),
            cap=pl.col("value").str.json_path_match("$.node.allocatable.gpu_milli").cast(pl.Int64),
        )
        .sort("ts", "offset")
        .group_by("node")
        .agg(pl.col("cap").last())
    )


def _order(partition: pl.Expr, offset: pl.Expr, after: int) -> pl.Expr:
    """Causal order within a partition: a cluster event at offset o (after=0), then decisions made on it (1)."""
    return partition.cast(pl.Int64) * (1 << 41) + offset.cast(pl.Int64) * 2 + after


def _part(
    lf: pl.LazyFrame, where: pl.Expr, rank: int, hold: pl.Expr, finish: pl.Expr, order: pl.Expr, **extra: pl.Expr
) -> pl.LazyFrame:
    columns = {
        "node": pl.col("node"),
        "queue": pl.when(pl.col("queue") != "").then(pl.col("queue")),
        "gpu_milli": pl.col("gpu_milli"),
        "job": pl.lit(None, pl.Utf8),
    }
    columns.update(extra)
    return lf.filter(where).select(
        "uid",
        "ts",
        "type",
        order=order,
        rank=pl.lit(rank, pl.Int8),
        hold=hold.cast(pl.Int8),
        finish=finish,
        **columns,
    )


def lifecycle(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Every pod row that matters, in causal order per pod (the log's order, not only time).

    Order: a cluster-events row by (partition, offset); a decision right after the event at its
    ``input_offset``; an outcome found only on bind-results right after the decision it answers.
    Columns: uid, ts, type, rank (0 pending, 1 bind decision, 2 bound, 3 observed on a node, 4 release), hold
    (1 while the pod holds resources), change (hold minus the pod's previous hold), finish (a release that
    ends the pod's work), and, carried forward per pod, node, queue, gpu_milli and job (from its
    ``BindRequested``).
    """
    kind = pl.col("type")
    events = lf.filter(pl.col("topic") == "cluster-events")
    observed = kind == "PodObserved"
    terminal = pl.col("value").str.contains('"phase":"Succeeded"', literal=True) | pl.col("value").str.contains(
        '"phase":"Failed"', literal=True
    )
    here = _order(pl.col("partition"), pl.col("offset"), 0)
    decided = _order(pl.col("partition"), pl.col("value").str.extract(r'"input_offset":(-?\d+)', 1).cast(pl.Int64), 1)
    decisions = lf.filter(kind.is_in(["BindRequested", "EvictionRequested"])).select(
        "uid", decision_id="id", order=decided, job=pl.col("value").str.extract(r'"job":"([^"]*)"', 1)
    )
    outcomes = ["PodBound", *RELEASE_TYPES]
    forwarded = events.filter(kind.is_in(outcomes)).select("id")
    answered = (
        lf.filter((pl.col("topic") == "bind-results") & kind.is_in(outcomes))
        .join(forwarded, on="id", how="anti")
        .with_columns(
            decision_id=pl.col("value").str.extract(r'"decision_id":"([^"]*)"', 1),
        )
        .join(decisions.select("decision_id", decision_order="order"), on="decision_id", how="left")
    )
    parts = [
        _part(events, observed & pl.col("node").is_null(), 0, pl.lit(0), pl.lit(False), here),
        _part(
            lf.filter(kind == "BindRequested"),
            pl.lit(True),
            1,
            pl.lit(1),
            pl.lit(False),
            decided,
            job=pl.col("value").str.extract(r'"job":"([^"]*)"', 1),
        ),
        _part(events, kind == "PodBound", 2, pl.lit(1), pl.lit(False), here),
        _part(
            events, observed & pl.col("node").is_not_null(), 3, pl.when(terminal).then(0).otherwise(1), terminal, here
        ),
        _part(events, kind.is_in(RELEASE_TYPES), 4, pl.lit(0), kind == "PodRemoved", here),
        _part(
            answered,
            pl.lit(True),
            2,
            pl.when(kind == "PodBound").then(1).otherwise(0),
            kind == "PodRemoved",
            pl.col("decision_order").fill_null(pl.col("offset")),
        ),
    ]
    rows = pl.concat(parts, how="vertical").sort("order", maintain_order=True)
    return rows.with_columns(
        change=(pl.col("hold") - pl.col("hold").shift(1, fill_value=0).over("uid")).cast(pl.Int8),
        node=pl.col("node").forward_fill().over("uid"),
        queue=pl.col("queue").forward_fill().over("uid"),
        gpu_milli=pl.col("gpu_milli").forward_fill().over("uid"),
    )


def pods(life: pl.LazyFrame) -> pl.LazyFrame:
    """Per pod: submit (first pending observation), first bind, last finish, GPU request, queue, job."""
    return life.group_by("uid").agg(
        submit=pl.col("ts").filter(pl.col("rank") == 0).min(),
        bind=pl.col("ts").filter(pl.col("rank").is_in([1, 2])).min(),
        finish=pl.col("ts").filter((pl.col("change") == -1) & pl.col("finish")).max(),
        gpu_milli=pl.col("gpu_milli").max(),
        queue=pl.col("queue").filter(pl.col("rank") == 1).first().fill_null(pl.col("queue").drop_nulls().first()),
        job=pl.col("job").drop_nulls().first(),
    )


def allocation_steps(life: pl.LazyFrame) -> pl.LazyFrame:
    """Only the rows that change allocation: ts, uid, queue, node, GPU delta (milli), finish flag."""
    return life.filter(pl.col("change") != 0).select(
        "ts",
        "order",
        "uid",
        queue=pl.col("queue").fill_null("(none)"),
        node="node",
        change="change",
        delta=pl.col("change").cast(pl.Int64) * pl.col("gpu_milli").fill_null(0),
        finish="finish",
    )


def step_average(ts: pl.Series, value: pl.Series, start: float, end: float) -> float:
    """Time-weighted mean over [start, end] of a step function (value[i] holds from ts[i] to ts[i+1])."""
    if end <= start or ts.len() == 0:
        return 0.0
    frame = pl.DataFrame({"ts": ts.clip(start, end), "v": value.cast(pl.Float64)})
    frame = frame.with_columns(width=pl.col("ts").shift(-1, fill_value=end) - pl.col("ts"))
    return float((frame["v"] * frame["width"]).sum()) / (end - start)


def step_sample(frame: pl.DataFrame, times: pl.Series, by: str | None = None) -> pl.DataFrame:
    """Value of step functions (columns ``ts``, ``v``; one per ``by`` group) at the given times."""
    grid = pl.DataFrame({"t": times.cast(pl.Float64)}).sort("t")
    ordered = frame.sort("ts")
    if by is None:
        joined = grid.join_asof(ordered, left_on="t", right_on="ts", strategy="backward")
        return joined.select("t", pl.col("v").fill_null(0.0))
    groups = ordered.select(by).unique().sort(by)
    full = grid.join(groups, how="cross").sort("t")
    joined = full.join_asof(ordered, left_on="t", right_on="ts", by=by, strategy="backward", check_sortedness=False)
    return joined.select("t", by, pl.col("v").fill_null(0.0))
