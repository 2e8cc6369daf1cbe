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
    "decided",
    "lifecycle",
    "node_capacity",
    "pod_labels",
    "pod_rows",
    "pods",
    "runs",
    "scan",
    "step_average",
    "step_sample",
]

RELEASE_TYPES = ("PodEvicted", "BindFailed", "PodRemoved")
CLUSTER = "cluster-events"


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


def _classified(frame: pl.LazyFrame) -> pl.LazyFrame:
    kind = pl.col("type")
    on_node = (kind == "PodObserved") & pl.col("node").is_not_null()
    terminal = on_node & (
        pl.col("value").str.contains('"phase":"Succeeded"', literal=True)
        | pl.col("value").str.contains('"phase":"Failed"', literal=True)
    )
    rank = (
        pl.when((kind == "PodObserved") & pl.col("node").is_null())
        .then(0)
        .when(kind == "PodBound")
        .then(2)
        .when(kind == "PodObserved")
        .then(3)
        .otherwise(4)
        .cast(pl.Int8)
    )
    return frame.select(
        "uid",
        "ts",
        order=pl.col("partition").cast(pl.Int64) * (1 << 41) + pl.col("offset") * 2 + (pl.col("topic") != CLUSTER),
        rank=rank,
        hold=((kind == "PodBound") | (on_node & terminal.not_())).cast(pl.Int8),
        finish=terminal | (kind == "PodRemoved"),
        node=pl.col("node"),
        gpu_milli=pl.col("gpu_milli"),
    )


def pod_rows(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The rows that say what a pod holds, unsorted: pending observations (rank 0, hold 0), ``PodBound`` (2, hold
    1), observations on a node (3, hold 1 unless Succeeded/Failed), releases (4, hold 0). From cluster-events
    (one scan), plus outcomes found only on bind-results (not forwarded to cluster-events).
    """
    kind = pl.col("type")
    outcomes = ["PodBound", *RELEASE_TYPES]
    events = lf.filter((pl.col("topic") == CLUSTER) & kind.is_in(["PodObserved", *outcomes]))
    only_results = lf.filter((pl.col("topic") == "bind-results") & kind.is_in(outcomes)).join(
        lf.filter((pl.col("topic") == CLUSTER) & kind.is_in(outcomes)).select("id"), on="id", how="anti"
    )
    return pl.concat([_classified(events), _classified(only_results)], how="vertical")


def runs(rows: pl.LazyFrame) -> pl.LazyFrame:
    """Per pod, assuming one run (true unless ``restarted``): submit, start, end, whether the end is a finish.

    Simple aggregations per kind of row (cheap at ten million rows); a pod evicted, whose bind failed, or
    observed pending more than once is ``restarted`` and gets replayed row by row by ``lifecycle``.
    """
    pending = (
        rows.filter(pl.col("rank") == 0)
        .group_by("uid")
        .agg(submit=pl.col("ts").min(), pendings=pl.len(), asked_gpu=pl.col("gpu_milli").max())
    )
    held = (
        rows.filter(pl.col("hold") == 1)
        .group_by("uid")
        .agg(start=pl.col("ts").min(), node=pl.col("node").first(), held_gpu=pl.col("gpu_milli").max())
    )
    released = (
        rows.filter((pl.col("hold") == 0) & (pl.col("rank") >= 3))
        .group_by("uid")
        .agg(
            end=pl.col("ts").min(),
            finished=pl.col("finish").any(),
            interrupted=((pl.col("rank") == 4) & pl.col("finish").not_()).any(),
        )
    )
    return (
        pending.join(held, on="uid", how="full", coalesce=True)
        .join(released, on="uid", how="full", coalesce=True)
        .select(
            "uid",
            "submit",
            "start",
            end=pl.when(pl.col("end") >= pl.col("start")).then(pl.col("end")),
            finished=pl.col("finished").fill_null(False),
            node="node",
            gpu_milli=pl.coalesce("held_gpu", "asked_gpu"),
            restarted=pl.col("interrupted").fill_null(False) | (pl.col("pendings").fill_null(0) > 1),
        )
    )


def lifecycle(rows: pl.LazyFrame) -> pl.LazyFrame:
    """Pod rows in log order (time, then offset) with per-pod state: change (hold minus the pod's previous hold),
    node and gpu_milli carried forward. Window functions per pod: use it on the pods that restarted only.
    """
    ordered = rows.sort("ts", "order")
    return ordered.with_columns(
        change=(pl.col("hold") - pl.col("hold").shift(1, fill_value=0).over("uid")).cast(pl.Int8),
        node=pl.col("node").forward_fill().over("uid"),
        gpu_milli=pl.col("gpu_milli").forward_fill().over("uid"),
    )


def decided(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Per pod, from its ``BindRequested`` decisions: first bind decision time, resolved queue, job."""
    return (
        lf.filter(pl.col("type") == "BindRequested")
        .group_by("uid")
        .agg(decided=pl.col("ts").min(), decided_queue=pl.col("queue").first(), value=pl.col("value").first())
        .select("uid", "decided", "decided_queue", job=pl.col("value").str.extract(r'"job":"([^"]*)"', 1))
    )


def pods(
    per_pod: pl.LazyFrame, complex_life: pl.LazyFrame, decisions: pl.LazyFrame, labels: pl.LazyFrame
) -> pl.LazyFrame:
    """Per pod: submit (first pending observation), first bind, last finish, GPU request, queue, job."""
    replayed = complex_life.group_by("uid").agg(
        first_start=pl.col("ts").filter(pl.col("change") == 1).min(),
        last_finish=pl.col("ts").filter((pl.col("change") == -1) & pl.col("finish")).max(),
    )
    return (
        per_pod.join(replayed, on="uid", how="left")
        .join(decisions, on="uid", how="left")
        .join(labels, on="uid", how="left")
        .select(
            "uid",
            "submit",
            bind=pl.min_horizontal(
                pl.when(pl.col("restarted")).then(pl.col("first_start")).otherwise(pl.col("start")), "decided"
            ),
            finish=pl.when(pl.col("restarted"))
            .then(pl.col("last_finish"))
            .otherwise(pl.when(pl.col("finished")).then(pl.col("end"))),
            gpu_milli="gpu_milli",
            queue=pl.coalesce("decided_queue", "label_queue", pl.lit("(none)")),
            job="job",
        )
    )


def pod_labels(lf: pl.LazyFrame) -> pl.LazyFrame:
    """uid -> the queue label of its first observation (when set)."""
    return (
        lf.filter((pl.col("type") == "PodObserved") & pl.col("node").is_null() & (pl.col("queue") != ""))
        .group_by("uid")
        .agg(label_queue=pl.col("queue").first())
    )


def allocation_steps(per_pod: pl.LazyFrame, complex_life: pl.LazyFrame) -> pl.LazyFrame:
    """The rows that change allocation (unsorted): ts, uid, node, GPU delta (milli)."""
    simple = per_pod.filter(pl.col("restarted").not_() & pl.col("start").is_not_null())
    gpu = pl.col("gpu_milli").fill_null(0)
    return pl.concat(
        [
            simple.select("uid", "node", ts="start", delta=gpu),
            simple.filter(pl.col("end").is_not_null()).select("uid", "node", ts="end", delta=-gpu),
            complex_life.filter(pl.col("change") != 0).select(
                "uid", "node", "ts", delta=pl.col("change").cast(pl.Int64) * gpu
            ),
        ],
        how="vertical",
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
