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
    "jobs_of_pods",
    "lifecycle",
    "node_capacity",
    "pods",
    "scan",
    "step_average",
    "step_sample",
]

START_TYPES = ("BindRequested", "PodBound")
RELEASE_TYPES = ("PodEvicted", "BindFailed", "PodRemoved")
_TERMINAL = r'"phase":"(?:Succeeded|Failed)"'


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


def pods(lf: pl.LazyFrame) -> pl.LazyFrame:
    """uid -> submit (first pending observation), GPU request, queue (decisions' queue, else the pod's label)."""
    observed = (
        lf.filter(pl.col("type") == "PodObserved")
        .group_by("uid")
        .agg(
            submit=pl.col("ts").filter(pl.col("node").is_null()).min(),
            gpu_milli=pl.col("gpu_milli").max(),
            pod_queue=pl.col("queue").filter(pl.col("queue") != "").first(),
        )
    )
    decided = (
        lf.filter(pl.col("type").is_in(["BindRequested", "PodPending", "EvictionRequested", "PodPipelined"]))
        .group_by("uid")
        .agg(decided_queue=pl.col("queue").first())
    )
    return observed.join(decided, on="uid", how="left").select(
        "uid", "submit", "gpu_milli", queue=pl.coalesce("decided_queue", "pod_queue", pl.lit("(none)"))
    )


def jobs_of_pods(lf: pl.LazyFrame) -> pl.LazyFrame:
    """uid -> job (the ``job`` of its decisions)."""
    return (
        lf.filter(pl.col("type").is_in(["BindRequested", "PodPending"]))
        .group_by("uid")
        .agg(pl.col("value").first())
        .select("uid", job=pl.col("value").str.extract(r'"job":"([^"]*)"', 1))
    )


def lifecycle(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Per pod, in time order: holding state (1/0), its change, node, and whether a release is a finish."""
    bound_obs = pl.col("type") == "PodObserved"
    rows = lf.filter(
        pl.col("type").is_in([*START_TYPES, *RELEASE_TYPES]) | (bound_obs & pl.col("node").is_not_null())
    ).select("uid", "ts", "type", "node", "value")
    terminal = bound_obs & pl.col("value").str.contains(_TERMINAL)
    holding = (
        pl.when(pl.col("type").is_in(RELEASE_TYPES) | terminal).then(pl.lit(0, pl.Int8)).otherwise(pl.lit(1, pl.Int8))
    )
    rank = (
        pl.when(pl.col("type") == "BindRequested")
        .then(0)
        .when(pl.col("type") == "PodBound")
        .then(1)
        .when(pl.col("type") == "PodObserved")
        .then(2)
        .otherwise(3)
    )
    finish = (pl.col("type") == "PodRemoved") | terminal
    return (
        rows.with_columns(hold=holding, rank=rank, finish=finish)
        .drop("value")
        .sort("uid", "ts", "rank")
        .with_columns(
            change=(pl.col("hold") - pl.col("hold").shift(1, fill_value=0).over("uid")).cast(pl.Int8),
            node=pl.col("node").forward_fill().over("uid"),
        )
    )


def allocation_steps(life: pl.LazyFrame, pod_info: pl.LazyFrame) -> pl.LazyFrame:
    """Only the rows that change allocation: ts, uid, queue, node, GPU delta (milli), finish flag."""
    return (
        life.filter(pl.col("change") != 0)
        .join(pod_info.select("uid", "gpu_milli", "queue"), on="uid", how="left")
        .with_columns(delta=pl.col("change").cast(pl.Int64) * pl.col("gpu_milli").fill_null(0))
        .select("ts", "rank", "uid", "queue", "node", "change", "delta", "finish")
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
