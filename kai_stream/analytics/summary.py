"""The history summary: per-queue and cluster figures, plus time series for the report plots.

One ``pl.collect_all`` of lazy scans (the per-pod table is one ``group_by`` over one filtered scan, see
``frames.pod_table``; the small queries read only their rows' columns), then two more of the per-pod frame,
allocation steps and jobs (queue and node as categoricals), each query selecting only the columns it reads.
Common-subplan elimination is off for the first collect_all: sharing the scan made polars materialise the union
of every query's columns for all rows (``value`` included), costlier than the separate scans. Pods and jobs
are grouped by hashed keys (``keys``); when two uids or job names share one, the summary is computed again on
the texts. Definitions of every figure are in ``kai_stream.analytics.frames``. Averages over time are
time-weighted over [first pod submit, last event]; those of fair share and deserved over the part of it after the
first ``FairShareRecorded`` (a live processor records its first with its first cycle).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from kai_stream.analytics import frames as F
from kai_stream.analytics.keys import HASHED, TEXT, Keys

__all__ = ["Summary", "jain_index", "summarize"]


@dataclass
class Summary:
    """Everything ``analyze`` prints; ``series`` holds the sampled time series for plots (not in JSON), sampled
    by ``sample`` when first read: only a report draws them."""

    cluster: dict[str, Any]
    queues: list[dict[str, Any]]
    pending_reasons: list[dict[str, Any]]
    evictions: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    sample: Callable[[], dict[str, pl.DataFrame]] = field(default=dict, repr=False)

    @cached_property
    def series(self) -> dict[str, pl.DataFrame]:
        return self.sample()

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "queues": self.queues,
            "pending_reasons": self.pending_reasons,
            "evictions": self.evictions,
            "notes": self.notes,
        }


def jain_index(values: list[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n Σx²): 1 when all equal, 1/n when one takes everything."""
    xs = [x for x in values if math.isfinite(x)]
    square = sum(x * x for x in xs)
    if not xs or square == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * square)


def _quantiles(values: pl.Series) -> dict[str, float | None]:
    """The average is taken over the sorted values: the rows come out of hash group-bys in no fixed order, and a
    float sum depends on its order (the last digit of an average would vary from run to run)."""
    if values.len() == 0:
        return {"avg": None, "p50": None, "p90": None, "p99": None}
    return {
        "avg": float(values.sort().mean()),  # type: ignore[arg-type]
        "p50": float(values.quantile(0.5, "linear")),  # type: ignore[arg-type]
        "p90": float(values.quantile(0.9, "linear")),  # type: ignore[arg-type]
        "p99": float(values.quantile(0.99, "linear")),  # type: ignore[arg-type]
    }


def _group_step_average(steps: pl.DataFrame, by: str, value: str, start: float, end: float) -> dict[str, float]:
    """Time-weighted mean per group of a step function given as (ts, by, value) rows, over [start, end]."""
    if steps.height == 0 or end <= start:
        return {}
    frame = (
        steps.select("ts", by, value)
        .sort("ts", maintain_order=True)
        .with_columns(pl.col("ts").clip(start, end))
        .with_columns(width=pl.col("ts").shift(-1).over(by).fill_null(end) - pl.col("ts"))
        .group_by(by)
        .agg(avg=(pl.col(value).cast(pl.Float64) * pl.col("width")).sum() / (end - start))
    )
    return {str(k): float(v) for k, v in frame.iter_rows()}


def _stranded(steps: pl.DataFrame, caps: pl.DataFrame) -> pl.LazyFrame:
    """Step function (ts, stranded) of the free GPU milli on partly used nodes, from the sorted steps."""

    def free_on_partly_used(used: pl.Expr) -> pl.Expr:
        return pl.when((used > 0) & (used < pl.col("cap"))).then(pl.col("cap") - used).otherwise(0)

    named = caps.filter(pl.col("node").is_not_null())
    cap = pl.col("node").replace_strict(named["node"].cast(pl.Categorical), named["cap"], default=None)
    per_node = (
        steps.lazy()
        .select("ts", "node", "delta", cap=cap)
        .with_columns(used=pl.col("delta").cum_sum().over("node"))
        .select(
            "ts",
            fdelta=free_on_partly_used(pl.col("used")) - free_on_partly_used(pl.col("used") - pl.col("delta")),
        )
    )
    return per_node.select("ts", stranded=pl.col("fdelta").cum_sum())


def _queue_quantiles(frame: pl.DataFrame | pl.LazyFrame, column: str) -> pl.LazyFrame:
    """Per queue: count, average (summed in sorted order, as in ``_quantiles``: a plain ``mean``, or ``sort().mean()``
    next to the quantiles, gave a last digit that depended on the row order) and quantiles."""
    return (
        frame.lazy()
        .group_by("queue")
        .agg(
            n=pl.len(),
            avg=pl.col(column).drop_nulls().sort().cum_sum().last() / pl.col(column).count(),
            p50=pl.col(column).quantile(0.5, "linear"),
            p90=pl.col(column).quantile(0.9, "linear"),
            p99=pl.col(column).quantile(0.99, "linear"),
        )
    )


def _quantiles_by_key(frame: pl.DataFrame) -> dict[str, dict[str, float | None]]:
    return {r["queue"]: {k: r[k] for k in ("avg", "p50", "p90", "p99")} for r in frame.iter_rows(named=True)}


def _fair_shares(rows: pl.DataFrame) -> pl.DataFrame:
    if rows.height == 0:
        return pl.DataFrame(schema={"ts": pl.Float64, "queue": pl.Utf8, "fair": pl.Int64, "deserved": pl.Int64})
    return (
        rows.explode("shares")
        .unnest("shares")
        .select("ts", "queue", fair="fair_gpu_milli", deserved="deserved_gpu_milli")
    )


def _queue_quotas(rows: pl.DataFrame) -> tuple[dict[str, int], set[str]]:
    """Leaf queue -> GPU quota (milli), and the names of parent queues (they hold no jobs)."""
    if rows.height == 0:
        return {}, set()
    frame = rows.select(
        queue=pl.col("value").str.json_path_match("$.queue.name"),
        quota=pl.col("value").str.json_path_match("$.queue.resources.gpu.quota").cast(pl.Int64),
        parent=pl.col("value").str.json_path_match("$.queue.parent"),
    )
    parents = set(frame["parent"].drop_nulls().to_list())
    return {q: int(v) for q, v, _ in frame.iter_rows() if q not in parents}, parents


def _series(
    steps: pl.DataFrame, stranded: pl.DataFrame, shares: pl.DataFrame, start: float, end: float, bins: int
) -> dict[str, pl.DataFrame]:
    times = pl.Series("t", [start + (end - start) * i / max(bins - 1, 1) for i in range(bins)], pl.Float64)
    cluster = F.step_sample(steps.select("ts", v=pl.col("alloc")), times)
    frag = F.step_sample(stranded.select("ts", v=pl.col("stranded")), times)
    queue_alloc = F.step_sample(steps.select("ts", "queue", v=pl.col("queue_alloc")), times, by="queue")
    out = {
        "cluster": cluster.rename({"v": "allocated"}).with_columns(stranded=frag["v"]),
        "queue_allocated": queue_alloc.rename({"v": "allocated"}),
    }
    if shares.height:
        fair = F.step_sample(shares.select("ts", "queue", v=pl.col("fair").cast(pl.Float64)), times, by="queue")
        deserved = F.step_sample(shares.select("ts", "queue", v=pl.col("deserved").cast(pl.Float64)), times, by="queue")
        out["queue_fair_share"] = fair.rename({"v": "fair_share"}).join(
            deserved.rename({"v": "deserved"}), on=["t", "queue"], how="left"
        )
    return out


def summarize(directory: str | Path, *, bins: int = 400) -> Summary:
    """Read the history under ``directory`` and compute the summary (see module docs for definitions)."""
    summary = _summarize(directory, bins, HASHED) or _summarize(directory, bins, TEXT)
    assert summary is not None, "texts as keys never clash"
    return summary


def _summarize(directory: str | Path, bins: int, keys: Keys) -> Summary | None:
    """The summary with pods and jobs told apart by ``keys``; None when two of them share a key."""
    lf = F.scan(directory)
    stream = F.pod_stream(lf, keys=keys)
    per_pod, result_ids, totals, caps, pending, evictions, shares_raw, queue_rows = pl.collect_all(
        [
            F.pod_table(stream, keys),
            F.result_ids(lf),
            lf.select(events=pl.len(), last=pl.col("ts").max()),
            F.node_capacity(lf),
            lf.filter(pl.col("type") == "PodPending")
            .group_by("code")
            .agg(decisions=pl.len(), pods=pl.col("uid").n_unique()),
            lf.filter(pl.col("type") == "EvictionRequested").select("ts", "uid", "queue", "action", "preemptor"),
            lf.filter(pl.col("type") == "FairShareRecorded").select("ts", "shares"),
            lf.filter(pl.col("type") == "QueueObserved").select("value"),
        ],
        engine="streaming",
        optimizations=pl.QueryOptFlags(comm_subplan_elim=False),
    )
    if result_ids.height:
        only_results = F.only_results(lf).collect()
        if only_results.height:
            stream = F.pod_stream(lf, only_results.lazy(), keys)
            per_pod = F.pod_table(stream, keys).collect()
    if per_pod["clash"].any():
        return None
    restarted = per_pod.filter("restarted")["pod"]
    complex_life = pl.DataFrame()
    if restarted.len():
        replay = stream.filter(pl.col("hold").is_not_null() & pl.col("pod").is_in(restarted.implode()))
        complex_life = F.lifecycle(replay, by="pod").collect()
    pods_df = F.pods(per_pod, complex_life).with_columns(pl.col("queue", "node").cast(pl.Categorical))
    notes: list[str] = []
    capacity = int(caps["cap"].sum() or 0)
    start = float(pods_df["submit"].min() or 0.0)  # type: ignore[arg-type]
    end = float(totals["last"][0] or 0.0)
    span = max(end - start, 0.0)

    evictions = evictions.with_columns(preemptor=keys.key("preemptor"), preemptor_check=keys.check("preemptor"))
    preemptors = evictions["preemptor"].drop_nulls().unique().implode()
    pods_full = pods_df.lazy().select(
        "pod",
        "pod_check",
        "submit",
        "bind",
        "finish",
        job=pl.coalesce("job", "pod"),
        job_check=pl.coalesce("job_check", "pod_check"),
        queue=pl.col("queue").fill_null("(none)"),
        delay=pl.col("bind") - pl.col("submit"),
    )
    steps, jobs, delays, pods_by_queue, pod_counts, by_uid = pl.collect_all(
        [
            F.allocation_steps(pods_df, complex_life)
            .sort("ts")
            .with_columns(alloc=pl.col("delta").cum_sum(), queue_alloc=pl.col("delta").cum_sum().over("queue")),
            pods_full.group_by("job").agg(
                *Keys.group_check("job_check"),
                queue=pl.col("queue").first(),
                submit=pl.col("submit").min(),
                finish=pl.col("finish").max(),
                done=pl.col("finish").is_not_null().all(),
                pods=pl.len(),
            ),
            pods_full.select("queue", "delay").filter(pl.col("delay").is_not_null()),
            pods_full.group_by("queue").len(),
            pods_full.select(pods=pl.len(), never_bound=pl.col("bind").is_null().sum()),
            pods_full.filter(pl.col("pod").is_in(preemptors)).select(
                preemptor="pod", preemptor_check="pod_check", uid_queue="queue"
            ),
        ]
    )
    if jobs.select(Keys.clash("job_check").any()).item():
        return None
    steps = steps.rechunk()  # one chunk, as the sums of the step averages were taken before (same rounding)
    completed = jobs.lazy().filter("done").select("queue", jct=pl.col("finish") - pl.col("submit"))
    timed = completed.filter(pl.col("jct").is_not_null())
    stranded, delay_by_queue, jct_by_queue, done_by_queue, done, jcts = pl.collect_all(
        [
            _stranded(steps, caps),
            _queue_quantiles(delays, "delay"),
            _queue_quantiles(timed, "jct"),
            completed.group_by("queue").len(),
            completed.select(pl.len()),
            timed.select("jct"),
        ]
    )
    avg_alloc = F.step_average(steps["ts"], steps["alloc"], start, end) if steps.height else 0.0
    avg_stranded = F.step_average(stranded["ts"], stranded["stranded"], start, end) if stranded.height else 0.0
    avg_free = capacity - avg_alloc

    shares = _fair_shares(shares_raw)
    quotas, parents = _queue_quotas(queue_rows)
    alloc_avg = _group_step_average(steps, "queue", "queue_alloc", start, end)
    known = max(start, float(shares["ts"].min())) if shares.height else start  # type: ignore[arg-type]
    fair_avg = _group_step_average(shares, "queue", "fair", known, end) if shares.height else {}
    deserved_avg = _group_step_average(shares, "queue", "deserved", known, end) if shares.height else {}
    if not shares.height:
        notes.append("no FairShareRecorded in this history: fair share unknown, deserved from Queue quotas")

    by_job = jobs.filter(pl.col("job").is_in(preemptors)).select(
        preemptor="job", preemptor_check="job_check", preemptor_queue="queue"
    )
    by = ["preemptor", "preemptor_check"]
    evictions = (
        evictions.join(by_job, on=by, how="left")
        .join(by_uid, on=by, how="left")
        .with_columns(preemptor_queue=pl.coalesce("preemptor_queue", "uid_queue"))
    )
    suffered = evictions.group_by("queue", "action").len()
    caused = evictions.filter(pl.col("preemptor_queue").is_not_null()).group_by("preemptor_queue", "action").len()

    def counts(frame: pl.DataFrame, key: str) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for q, a, n in frame.sort(key, "action").iter_rows():
            out.setdefault(q, {})[a] = int(n)
        return out

    suffered_by, caused_by = counts(suffered, "queue"), counts(caused, "preemptor_queue")
    delay_by, jct_by = _quantiles_by_key(delay_by_queue), _quantiles_by_key(jct_by_queue)
    pods_by = dict(pods_by_queue.iter_rows())
    done_by = dict(done_by_queue.iter_rows())
    empty = _quantiles(pl.Series([], dtype=pl.Float64))
    queue_names = sorted((set(pods_by) | set(quotas) | set(shares["queue"].unique().to_list())) - parents)
    if parents:
        notes.append(f"parent queues (no jobs of their own, left out of the per-queue figures): {sorted(parents)}")
    queues: list[dict[str, Any]] = []
    for q in queue_names:
        deserved = deserved_avg.get(q)
        if deserved is None and q in quotas:
            deserved = float(quotas[q]) if quotas[q] >= 0 else None
        queues.append(
            {
                "queue": q,
                "pods": int(pods_by.get(q, 0)),
                "jobs_completed": int(done_by.get(q, 0)),
                "avg_allocated_gpus": alloc_avg.get(q, 0.0) / 1000,
                "avg_fair_share_gpus": fair_avg[q] / 1000 if q in fair_avg else None,
                "avg_deserved_gpus": deserved / 1000 if deserved is not None else None,
                "queueing_delay_s": delay_by.get(q, empty),
                "jct_s": jct_by.get(q, empty),
                "evictions_suffered": suffered_by.get(q, {}),
                "evictions_caused": caused_by.get(q, {}),
            }
        )
    ratios = [d["avg_allocated_gpus"] / d["avg_fair_share_gpus"] for d in queues if (d["avg_fair_share_gpus"] or 0) > 0]
    cluster = {
        "events": int(totals["events"][0]),
        "start_s": start,
        "end_s": end,
        "span_h": span / 3600,
        "capacity_gpus": capacity / 1000,
        "nodes": caps.height,
        "pods": int(pod_counts["pods"][0]),
        "pods_never_bound": int(pod_counts["never_bound"][0]),
        "jobs": jobs.height,
        "jobs_completed": int(done.item()),
        "avg_allocated_gpus": avg_alloc / 1000,
        "utilization": avg_alloc / capacity if capacity else None,
        "avg_stranded_gpus": avg_stranded / 1000,
        "stranded_share_of_free": avg_stranded / avg_free if avg_free > 0 else None,
        "queueing_delay_s": _quantiles(delays["delay"]),
        "jct_s": _quantiles(jcts["jct"]),
        "evictions": int(evictions.height),
        "evictions_by_action": {a: int(n) for a, n in evictions.group_by("action").len().sort("action").iter_rows()},
        "jain_fairness": jain_index(ratios),
    }
    pending_reasons = [
        {"code": c, "decisions": int(d), "pods": int(p)}
        for c, d, p in pending.sort("decisions", "code", descending=[True, False]).iter_rows()
    ]
    eviction_rows = [
        {"queue": q, "action": a, "count": int(n)} for q, a, n in suffered.sort("queue", "action").iter_rows()
    ]

    def series() -> dict[str, pl.DataFrame]:
        return _series(steps, stranded, shares, start, end, bins) if span > 0 and steps.height else {}

    return Summary(cluster, queues, pending_reasons, eviction_rows, notes, series)
