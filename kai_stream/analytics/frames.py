"""Lazy polars frames derived from the Parquet history: pod lifecycles, allocation steps, capacities.

Definitions (what every number in the summary means):

* submit of a pod = first ``PodObserved`` with no node (pending); bind = first ``BindRequested`` or
  ``PodBound``; queueing delay = bind - submit.
* A pod holds its GPUs from ``BindRequested``/``PodBound`` (or a ``PodObserved`` on a node, not finished)
  until ``PodEvicted``, ``BindFailed``, ``PodRemoved`` or a ``PodObserved`` in phase Succeeded/Failed.
  Per pod the state is 1 (holding) or 0; a step of the cluster's allocation is the change of that state times
  the pod's GPU request, so duplicated outcomes (e.g. the same ``PodBound`` on two topics) change nothing.
* A pod finishes at a release that is not an eviction or a failed bind; a job (pod group, from the
  decisions' or the pod observations' ``job`` field; else the pod itself) completes when all its pods
  finished; JCT = last finish - first submit (for the jobs submitted in the log: a job running when it starts
  counts as completed, without a JCT).
* Stranded GPUs: the free GPU capacity of nodes that are partly used (0 < used < allocatable).

Speed: bulk rows (pods, binds, outcomes) are read through typed columns only (``phase``, ``job``,
``preemptor``, ``shares``; never ``value``), and per pod everything is one ``group_by`` of one filtered scan
(``pod_table``) by the pod's hashed uid (``keys``). JSON ``value`` is decoded only for the few node and queue
rows. Segments written before the typed columns existed get them extracted from ``value`` (slower, same figures).
"""

from __future__ import annotations

import functools
import itertools
import operator
from pathlib import Path

import polars as pl

from kai_stream.analytics.keys import HASHED, Keys
from kai_stream.history.schema import HISTORY_SCHEMA, HISTORY_V2_COLUMNS

__all__ = [
    "allocation_steps",
    "lifecycle",
    "node_capacity",
    "only_results",
    "pod_rows",
    "pod_stream",
    "pod_table",
    "result_ids",
    "scan",
    "step_average",
    "step_sample",
]

RELEASE_TYPES = ("PodEvicted", "BindFailed", "PodRemoved")
OUTCOME_TYPES = ("PodBound", *RELEASE_TYPES)
CLUSTER = "cluster-events"
BIND_RESULTS = "bind-results"


def _one_of(column: str, values: tuple[str, ...]) -> pl.Expr:
    """``column`` equals one of ``values``: on 10 M rows, comparisons cost polars less than ``is_in``'s lookups."""
    return functools.reduce(operator.or_, (pl.col(column) == v for v in values))


def _typed(path: str) -> bool:
    return set(HISTORY_V2_COLUMNS) <= set(pl.read_parquet_schema(path))


_SHARE_JSON = pl.Struct(
    {
        "queues": pl.List(
            pl.Struct(
                {
                    "queue": pl.Utf8,
                    "fair_share": pl.Struct({"gpu_milli": pl.Int64}),
                    "deserved": pl.Struct({"gpu_milli": pl.Int64}),
                }
            )
        )
    }
)


def _shares_from_value() -> pl.Expr:
    share = pl.element().struct
    return (
        pl.col("value")
        .str.json_decode(_SHARE_JSON)
        .struct.field("queues")
        .list.eval(
            pl.struct(
                queue=share.field("queue"),
                fair_gpu_milli=share.field("fair_share").struct.field("gpu_milli"),
                deserved_gpu_milli=share.field("deserved").struct.field("gpu_milli"),
            )
        )
    )


def _typed_from_value(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Segments written before the typed columns: the same fields extracted from ``value``."""
    kind = pl.col("type")
    return lf.with_columns(
        shares=pl.when(kind == "FairShareRecorded").then(_shares_from_value()),
        phase=pl.when(kind == "PodObserved").then(pl.col("value").str.extract(r'"phase":"([^"]*)"', 1)),
        job=pl.when(pl.col("action").is_not_null()).then(pl.col("value").str.extract(r'"job":"([^"]*)"', 1)),
        preemptor=pl.when(kind == "EvictionRequested").then(pl.col("value").str.extract(r'"preemptor":"([^"]*)"', 1)),
    )


def scan(directory: str | Path) -> pl.LazyFrame:
    """Every history segment under ``directory`` (any topic layout, segments in path order), minus the
    dead-letter topic; segments without the typed columns get them from ``value``."""
    root = Path(directory)
    files = sorted(str(p) for p in root.glob("**/*.parquet"))
    if not files:
        raise FileNotFoundError(f"no history segments (*.parquet) under {root}")
    parts = []
    for typed, run in itertools.groupby(files, key=_typed):
        lf = pl.scan_parquet(list(run), schema=HISTORY_SCHEMA, missing_columns="insert")
        parts.append(lf if typed else _typed_from_value(lf))
    whole = parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical")
    return whole.filter(pl.col("topic") != "dead-letter")


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


def _pod_state() -> dict[str, pl.Expr]:
    """Per pod row: log order, rank (0 pending observation, 2 ``PodBound``, 3 observation on a node,
    4 release), hold (1 while holding GPUs) and finish."""
    kind = pl.col("type")
    on_node = (kind == "PodObserved") & pl.col("node").is_not_null()
    terminal = on_node & _one_of("phase", ("Succeeded", "Failed")).fill_null(False)
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
    return {
        "order": pl.col("partition").cast(pl.Int64) * (1 << 41) + pl.col("offset") * 2 + (pl.col("topic") != CLUSTER),
        "rank": rank,
        "hold": ((kind == "PodBound") | (on_node & terminal.not_())).cast(pl.Int8),
        "finish": terminal | (kind == "PodRemoved"),
    }


def _pod_kinds() -> pl.Expr:
    return (pl.col("topic") == CLUSTER) & _one_of("type", ("PodObserved", *OUTCOME_TYPES))


def only_results(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Outcomes found only on bind-results (not forwarded to cluster-events)."""
    outcome = _one_of("type", OUTCOME_TYPES)
    return lf.filter((pl.col("topic") == BIND_RESULTS) & outcome).join(
        lf.filter((pl.col("topic") == CLUSTER) & outcome).select("id"), on="id", how="anti"
    )


_POD_COLUMNS = ("ts", "order", "rank", "hold", "finish", "node", "gpu_milli")


def pod_rows(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The rows that say what a pod holds, unsorted: pending observations (rank 0, hold 0), ``PodBound`` (2, hold
    1), observations on a node (3, hold 1 unless Succeeded/Failed), releases (4, hold 0). From cluster-events
    (one scan), plus outcomes found only on bind-results.
    """
    state = _pod_state()
    return pl.concat(
        [
            frame.select("uid", "ts", **state, node="node", gpu_milli="gpu_milli")
            for frame in (lf.filter(_pod_kinds()), only_results(lf))
        ],
        how="vertical",
    )


def pod_stream(lf: pl.LazyFrame, only_results: pl.LazyFrame | None = None, keys: Keys = HASHED) -> pl.LazyFrame:
    """One filtered scan of every row ``pod_table`` needs: the cluster-events pod rows of ``pod_rows``,
    ``BindRequested`` decisions (rank 1, hold null) and queue labels and pod groups of observations (``label``; a pod
    running when the log starts has no decision, only its observation on a node; a gang pod never bound has no
    ``BindRequested``), then
    ``only_results`` (outcomes only on bind-results) when given. Columns: those of ``pod_rows`` with the uid as
    ``pod`` (its key) and ``pod_check``, and the decided queue, job (key) with ``job_check``, label queue."""
    kind = pl.col("type")
    pod = _pod_kinds()
    decision = kind == "BindRequested"
    label = ((kind == "PodObserved") & (pl.col("queue") != "")).fill_null(False)
    state = _pod_state()
    main = lf.filter(pod | decision | label).select(
        pod=keys.key("uid"),
        pod_check=keys.check("uid"),
        ts="ts",
        order=state["order"],
        rank=pl.when(pod).then(state["rank"]).when(decision).then(pl.lit(1, pl.Int8)),
        hold=pl.when(pod).then(state["hold"]),
        finish=state["finish"],
        node=pl.when(pod).then(pl.col("node")).cast(pl.Categorical),
        gpu_milli="gpu_milli",
        decided_queue=pl.when(decision).then(pl.col("queue")).cast(pl.Categorical),
        label_queue=pl.when(label).then(pl.col("queue")).cast(pl.Categorical),
        job=pl.when(decision | label).then(keys.key("job")),
        job_check=pl.when(decision | label).then(keys.check("job")),
    )
    if only_results is None:
        return main.with_row_index("row")
    results = only_results.select(
        pod=keys.key("uid"),
        pod_check=keys.check("uid"),
        ts="ts",
        **state,
        node=pl.col("node").cast(pl.Categorical),
        gpu_milli="gpu_milli",
        decided_queue=pl.lit(None, pl.Categorical),
        label_queue=pl.lit(None, pl.Categorical),
        job=pl.lit(None, main.collect_schema()["job"]),
        job_check=pl.lit(None, pl.UInt64),
    )
    return pl.concat([main, results], how="vertical").with_row_index("row")


def result_ids(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Ids of the outcomes on bind-results (usually none, or all also on cluster-events)."""
    return lf.filter((pl.col("topic") == BIND_RESULTS) & _one_of("type", OUTCOME_TYPES)).select("id")


def pod_table(stream: pl.LazyFrame, keys: Keys = HASHED) -> pl.LazyFrame:
    """Per pod (key ``pod``), assuming one run (true unless ``restarted``): submit, start, end, whether the end
    is a finish, node, GPU request, first bind decision time, queue (first bind decision's, else the first label,
    else "(none)"), job, and ``clash`` (two uids share the key, see ``keys``). A pod evicted, whose bind failed,
    or observed pending more than once is ``restarted`` (one sum: pending observations plus twice such releases
    reaches 2) and gets replayed row by row by ``lifecycle``.
    """
    rank, hold = pl.col("rank"), pl.col("hold")
    pending, held, released, decision = rank == 0, hold == 1, (hold == 0) & (rank >= 3), rank == 1

    def where(cond: pl.Expr, column: str | pl.Expr) -> pl.Expr:
        return pl.when(cond).then(column)

    interrupted = (released & (rank == 4) & pl.col("finish").not_()).fill_null(False)
    per_pod = stream.group_by("pod").agg(
        *Keys.group_check("pod_check"),
        submit=where(pending, "ts").min(),
        restarts=(pending.cast(pl.UInt32) + 2 * interrupted.cast(pl.UInt32)).sum(),
        asked_gpu=where(pending, "gpu_milli").max(),
        start=where(held, "ts").min(),
        node=where(held, "node").first(ignore_nulls=True),
        held_gpu=where(held, "gpu_milli").max(),
        end=where(released, "ts").min(),
        finished=(released & pl.col("finish")).any(),
        decided=where(decision, "ts").min(),
        decided_queue=pl.col("decided_queue").first(ignore_nulls=True),
        job=keys.first("job"),
        job_check=keys.first("job_check"),
        label_queue=pl.col("label_queue").first(ignore_nulls=True),
    )
    any_pod_row = pl.any_horizontal(pl.col("submit", "start", "end").is_not_null())
    return per_pod.filter(any_pod_row).select(
        "pod",
        "pod_check",
        clash=Keys.clash("pod_check"),
        submit="submit",
        start="start",
        end=pl.when(pl.col("end") >= pl.col("start")).then(pl.col("end")),
        finished="finished",
        node="node",
        gpu_milli=pl.coalesce("held_gpu", "asked_gpu"),
        restarted=pl.col("restarts") >= 2,
        decided="decided",
        queue=pl.coalesce("decided_queue", "label_queue", pl.lit("(none)", pl.Categorical)),
        job=keys.unpack("job"),
        job_check=keys.unpack("job_check"),
    )


def lifecycle(rows: pl.LazyFrame, by: str = "uid") -> pl.LazyFrame:
    """Pod rows in log order (time, then offset) with per-pod state (pods told apart by column ``by``): change
    (hold minus the pod's previous hold), node and gpu_milli carried forward, and finish false after an eviction or
    failed bind until the pod is pending again (an evicted pod observed terminating, then removed, did not
    finish). Window functions per pod: use it on the pods that restarted only.
    """
    ordered = rows.select(by, *_POD_COLUMNS).sort("ts", "order").with_row_index("at")
    interrupted = (pl.col("rank") == 4) & pl.col("finish").not_()
    last_interrupt = pl.when(interrupted).then(pl.col("at")).forward_fill().over(by)
    last_pending = pl.when(pl.col("rank") == 0).then(pl.col("at")).forward_fill().over(by)
    after_interrupt = last_interrupt.is_not_null() & (last_pending.is_null() | (last_pending < last_interrupt))
    return ordered.with_columns(
        change=(pl.col("hold") - pl.col("hold").shift(1, fill_value=0).over(by)).cast(pl.Int8),
        node=pl.col("node").forward_fill().over(by),
        gpu_milli=pl.col("gpu_milli").forward_fill().over(by),
        finish=pl.col("finish") & after_interrupt.not_(),
    ).drop("at")


def pods(per_pod: pl.DataFrame, complex_life: pl.DataFrame) -> pl.DataFrame:
    """Per pod (key ``pod``, lifecycles of ``complex_life`` by ``pod``): submit (first pending observation), first
    bind, last finish, GPU request, queue, job, and the columns ``allocation_steps`` needs (node, start, end,
    restarted)."""
    restarted = pl.col("restarted")
    if complex_life.height:
        replayed = complex_life.group_by("pod").agg(
            first_start=pl.col("ts").filter(pl.col("change") == 1).min(),
            last_finish=pl.col("ts").filter((pl.col("change") == -1) & pl.col("finish")).max(),
        )
        per_pod = per_pod.join(replayed, on="pod", how="left", maintain_order="left")
    else:
        per_pod = per_pod.with_columns(first_start=pl.lit(None, pl.Float64), last_finish=pl.lit(None, pl.Float64))
    return per_pod.select(
        "pod",
        "pod_check",
        "submit",
        bind=pl.min_horizontal(pl.when(restarted).then(pl.col("first_start")).otherwise(pl.col("start")), "decided"),
        finish=pl.when(restarted).then(pl.col("last_finish")).otherwise(pl.when(pl.col("finished")).then("end")),
        gpu_milli="gpu_milli",
        queue="queue",
        job="job",
        job_check="job_check",
        node="node",
        start="start",
        end="end",
        restarted="restarted",
    )


def allocation_steps(pods_df: pl.DataFrame, complex_life: pl.DataFrame) -> pl.LazyFrame:
    """The rows that change allocation, unsorted: ts, node, queue, GPU delta (milli)."""
    simple = (
        pods_df.lazy()
        .select("node", "queue", "start", "end", "gpu_milli", "restarted")
        .filter(pl.col("restarted").not_() & pl.col("start").is_not_null())
    )
    gpu = pl.col("gpu_milli").fill_null(0)
    parts = [
        simple.select("node", "queue", ts="start", delta=gpu),
        simple.filter(pl.col("end").is_not_null()).select("node", "queue", ts="end", delta=-gpu),
    ]
    if complex_life.height:
        changes = complex_life.filter(pl.col("change") != 0).join(
            pods_df.select("pod", "queue"), on="pod", how="left", maintain_order="left"
        )
        node = pl.col("node").cast(pods_df.schema["node"])
        parts.append(changes.lazy().select(node, "queue", "ts", delta=pl.col("change").cast(pl.Int64) * gpu))
    return pl.concat(parts, how="vertical")


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
    return joined.select("t", pl.col(by).cast(pl.Utf8), pl.col("v").fill_null(0.0))
