"""Trace simulation speed and analyze speed, each with a same-run baseline.

1. ``trace``: ITP cluster07, first ``--window`` (default 600 h: ~6,600 jobs) on a 256-GPU cluster
   (examples/clusters/gpu256.yaml, 4 hash teams, auto queues) through the pure core: simulated jobs per wall
   second, avg JCT, p99 queueing delay, utilization. Baseline: a naive FIFO first-fit loop in plain Python
   over the same jobs and nodes (no core, no history), to show what the core and the history cost.
2. ``analyze``: a 10,000,000-row synthetic history (1.9 M pods through pending -> bind -> finish, with
   pending reasons and evictions; no fair-share or queue records: those few rows are JSON-decoded alone and
   are covered by tests/analytics), generated column-wise with polars, filling the typed columns (phase, job,
   preemptor, shares) as ``schema.event_row`` does; the full summary time and CPU seconds. Baseline: the cheapest read
   of what the summary needs, a raw polars scan of the columns it reads for the bulk rows (``SUMMARY_COLUMNS``;
   it never reads ``value`` for them). Until 2026-11-22 the baseline scanned every column but ``value`` (also
   printed, to compare with older figures): a summary that needs fewer columns made that one too generous.

Usage: ``.venv/bin/python benchmarks/bench_trace.py [trace|analyze|all] [--window 0:600h] [--rows 10000000]``
"""

from __future__ import annotations

import argparse
import heapq
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kai_stream.analytics import summarize  # noqa: E402
from kai_stream.core.config import SchedulerConfig  # noqa: E402
from kai_stream.core.scheduler import compiled  # noqa: E402
from kai_stream.history.schema import HISTORY_SCHEMA  # noqa: E402
from kai_stream.trace.clusters import auto_queue_events, cluster_events  # noqa: E402
from kai_stream.trace.loaders import load_trace, parse_window  # noqa: E402
from kai_stream.trace.simulator import simulate_trace  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"


def naive_fifo(jobs: pl.DataFrame, nodes: int, gpus_per_node: int) -> tuple[float, float]:
    """Strict FIFO, first fit of whole GPUs per pod; returns (wall seconds, avg JCT)."""
    started = time.perf_counter()
    free = [gpus_per_node] * nodes
    queue: list[tuple[float, int, list[int]]] = []
    running: list[tuple[float, int, list[tuple[int, int]]]] = []
    rows = jobs.select("submit", "duration", "gpus").rows()
    t0 = rows[0][0]
    jct_total, seq, i, now = 0.0, 0, 0, 0.0
    pending: list[tuple[float, float, list[int]]] = []
    while i < len(rows) or running or pending:
        nxt = rows[i][0] - t0 if i < len(rows) else math.inf
        done = running[0][0] if running else math.inf
        now = min(nxt, done)
        while running and running[0][0] == now:
            _, _, held = heapq.heappop(running)
            for node, n in held:
                free[node] += n
        while i < len(rows) and rows[i][0] - t0 == now:
            gpus = int(rows[i][2])
            pods = [gpus_per_node] * (gpus // gpus_per_node) + ([gpus % gpus_per_node] if gpus % gpus_per_node else [])
            pending.append((now, float(rows[i][1]), pods or [0]))
            i += 1
        while pending:
            submit, duration, pods = pending[0]
            trial = list(free)
            held = []
            for need in pods:
                node = next((k for k in range(nodes) if trial[k] >= need), -1)
                if node < 0:
                    break
                trial[node] -= need
                held.append((node, need))
            if len(held) < len(pods):
                break
            free = trial
            pending.pop(0)
            seq += 1
            heapq.heappush(running, (now + duration, seq, held))
            jct_total += now + duration - submit
        if not running and pending and i >= len(rows):
            break
    del queue
    return time.perf_counter() - started, jct_total / max(len(rows), 1)


def bench_trace(window: str) -> None:
    trace = load_trace(TRACES / "itp" / "cluster07.csv", "itp", window=parse_window(window))
    base = cluster_events(ROOT / "examples" / "clusters" / "gpu256.yaml")
    base += auto_queue_events(base, trace.teams)
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as tmp:
        cpu = time.process_time()
        stats = simulate_trace(trace, base, SchedulerConfig(), Path(tmp) / "h")
        sim_cpu = time.process_time() - cpu
        t = time.perf_counter()
        summary = summarize(Path(tmp) / "h")
        analyze_s = time.perf_counter() - t
    fifo_s, fifo_jct = naive_fifo(trace.jobs, 32, 8)
    c = summary.cluster
    print(
        f"trace: ITP cluster07 window {window}: {stats.jobs:,} jobs, {stats.pods:,} pods, "
        f"{stats.simulated_s / 3600:,.0f} simulated h on 256 GPUs; scheduler core "
        f"{'compiled (mypyc)' if compiled() else 'from sources (not compiled)'}"
    )
    print(
        f"  wall {stats.wall_s:.1f} s -> {stats.jobs / stats.wall_s:,.0f} simulated jobs/s "
        f"({stats.simulated_s / 3600 / stats.wall_s:,.0f} simulated h/s; {sim_cpu:.1f} CPU s)"
    )
    print(
        f"  cycles {stats.cycles:,} ({stats.cycle_wall_s:.1f} s in the core, "
        f"{1000 * stats.cycle_wall_s / max(stats.cycles, 1):.1f} ms/cycle), skipped {stats.skipped_cycles:,}, "
        f"decisions {stats.decisions:,} (PodPending {stats.pending_reasons:,}), history rows {stats.events:,} "
        f"(write {stats.write_wall_s:.1f} s)"
    )
    print(
        f"  avg JCT {c['jct_s']['avg'] / 3600:.2f} h, p99 queueing delay {c['queueing_delay_s']['p99'] / 3600:.2f} h, "
        f"utilization {100 * c['utilization']:.1f} %, analyze {analyze_s:.2f} s"
    )
    print(
        f"  baseline naive FIFO loop (no core, no history): {fifo_s:.2f} s, avg JCT {fifo_jct / 3600:.2f} h; "
        f"ratio core/naive = {stats.wall_s / fifo_s:.1f}x"
    )


def _cat(template: str, *exprs: pl.Expr) -> pl.Expr:
    """``template`` with each ``{}`` replaced by the next expression (JSON braces elsewhere stay literal)."""
    pieces = template.split("{}")
    parts: list[pl.Expr] = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append(pl.lit(piece))
        if i < len(exprs):
            parts.append(exprs[i].cast(pl.Utf8))
    return pl.concat_str(parts)


def synthetic_history(directory: Path, rows: int, files: int = 8) -> int:
    """Write a ~``rows``-row history column-wise (5.26 rows per pod on average); return the row count."""
    pods = int(rows / 5.26)
    filler = "x" * 180
    uid = _cat("pod-{}", pl.col("i"))
    base = pl.DataFrame({"i": pl.arange(0, pods, eager=True)}).with_columns(
        submit=(pl.col("i") * 1.7).cast(pl.Float64),
        queue=_cat("team-{}", pl.col("i") % 8),
        node=_cat("node-{}", (pl.col("i") * 7919) % 1000),
        gpu=((pl.col("i") % 4) + 1) * 1000,
        wait=((pl.col("i") * 31) % 600).cast(pl.Float64),
        run=((pl.col("i") * 97) % 7200 + 60).cast(pl.Float64),
    )

    def frame(
        topic: str,
        kind: str,
        ts: pl.Expr,
        value: pl.Expr,
        node: bool,
        where: pl.Expr | None = None,
        code: pl.Expr | None = None,
        action: str | None = None,
        phase: str | None = None,
        preemptor: pl.Expr | None = None,
    ) -> pl.DataFrame:
        src = base if where is None else base.filter(where)
        return src.select(
            topic=pl.lit(topic),
            partition=pl.lit(0, pl.Int32),
            offset=pl.lit(0, pl.Int64),
            ts=ts,
            type=pl.lit(kind),
            id=_cat("{}-{}", pl.lit(kind), pl.col("i")),
            pool=pl.lit("default"),
            namespace=pl.lit("trace"),
            name=uid,
            uid=uid,
            queue=pl.col("queue"),
            node=pl.col("node") if node else pl.lit(None, pl.Utf8),
            action=pl.lit(action, pl.Utf8),
            code=code if code is not None else pl.lit(None, pl.Utf8),
            gpu_milli=pl.col("gpu").cast(pl.Int64),
            value=value,
            record_ts=pl.lit(None, pl.Int64),
            phase=pl.lit(phase, pl.Utf8),
            job=_cat("trace/{}", uid) if topic == "decisions" else pl.lit(None, pl.Utf8),
            preemptor=preemptor if preemptor is not None else pl.lit(None, pl.Utf8),
            shares=pl.lit(None, HISTORY_SCHEMA["shares"]),
        )

    bind_ts = pl.col("submit") + pl.col("wait")
    end_ts = bind_ts + pl.col("run")
    job = _cat('{"type":"X","job":"trace/{}","queue":"{}","f":"{}"}', uid, pl.col("queue"), pl.lit(filler))
    frames = [
        frame(
            "cluster-events",
            "PodObserved",
            pl.col("submit"),
            _cat('{"pod":{"name":"{}","phase":"Pending"},"f":"{}"}', uid, pl.lit(filler)),
            False,
            phase="Pending",
        ),
        frame(
            "decisions",
            "PodPending",
            pl.col("submit"),
            job,
            False,
            where=pl.col("i") % 4 == 0,
            code=pl.when(pl.col("i") % 8 == 0).then(pl.lit("NoNodeFits")).otherwise(pl.lit("QueueOverLimit")),
        ),
        frame("decisions", "BindRequested", bind_ts, job, True, action="allocate"),
        frame("cluster-events", "PodBound", bind_ts, _cat('{"bound":"{}","f":"{}"}', uid, pl.lit(filler)), True),
        frame(
            "cluster-events",
            "PodObserved",
            end_ts,
            _cat('{"pod":{"name":"{}","phase":"Succeeded"},"f":"{}"}', uid, pl.lit(filler)),
            True,
            phase="Succeeded",
        ),
        frame("cluster-events", "PodRemoved", end_ts, _cat('{"removed":"{}"}', uid), False),
        frame(
            "decisions",
            "EvictionRequested",
            bind_ts + 1,
            _cat('{"preemptor":"trace/pod-{}"}', pl.col("i") + 1),
            True,
            where=pl.col("i") % 100 == 0,
            action="reclaim",
            preemptor=_cat("trace/pod-{}", pl.col("i") + 1),
        ),
    ]
    nodes = pl.DataFrame({"n": range(1000)}).select(
        topic=pl.lit("cluster-events"),
        partition=pl.lit(0, pl.Int32),
        offset=pl.lit(0, pl.Int64),
        ts=pl.lit(0.0),
        type=pl.lit("NodeObserved"),
        id=_cat("n{}", pl.col("n")),
        pool=pl.lit("default"),
        namespace=pl.lit(None, pl.Utf8),
        name=pl.lit(None, pl.Utf8),
        uid=pl.lit(None, pl.Utf8),
        queue=pl.lit(None, pl.Utf8),
        node=pl.lit(None, pl.Utf8),
        action=pl.lit(None, pl.Utf8),
        code=pl.lit(None, pl.Utf8),
        gpu_milli=pl.lit(None, pl.Int64),
        value=_cat('{"node":{"name":"node-{}","allocatable":{"gpu_milli":8000}}}', pl.col("n")),
        record_ts=pl.lit(None, pl.Int64),
        phase=pl.lit(None, pl.Utf8),
        job=pl.lit(None, pl.Utf8),
        preemptor=pl.lit(None, pl.Utf8),
        shares=pl.lit(None, HISTORY_SCHEMA["shares"]),
    )
    everything = pl.concat([nodes, *frames]).with_columns(is_ce=pl.col("topic") == "cluster-events")
    everything = everything.sort("ts", pl.col("is_ce"), descending=[False, True], maintain_order=True)
    everything = everything.with_columns(
        seen=pl.col("is_ce").cast(pl.Int64).cum_sum() - 1,
        offset=(pl.int_range(pl.len(), dtype=pl.Int64)).over("topic"),
    ).with_columns(
        value=pl.when(pl.col("is_ce"))
        .then(pl.col("value"))
        .otherwise(_cat('{"input_offset":{},', pl.col("seen")) + pl.col("value").str.slice(1))
    )
    everything = everything.select(list(HISTORY_SCHEMA))
    size = -(-everything.height // files)
    for k in range(files):
        part = everything.slice(k * size, size)
        for topic in ("cluster-events", "decisions"):
            out = directory / topic / "0"
            out.mkdir(parents=True, exist_ok=True)
            part.filter(pl.col("topic") == topic).write_parquet(out / f"{k:020d}.parquet")
    return everything.height


SUMMARY_COLUMNS = (
    "topic", "partition", "offset", "ts", "type", "uid", "queue", "node", "action", "code", "gpu_milli", "phase",
    "job", "preemptor",
)  # fmt: skip


def _timed_scan(directory: Path, columns: list[str]) -> tuple[float, float, int]:
    t, cpu = time.perf_counter(), time.process_time()
    raw = pl.scan_parquet(str(directory / "**" / "*.parquet")).select(columns).collect()
    return time.perf_counter() - t, time.process_time() - cpu, raw.height


def bench_analyze(rows: int, history: Path | None = None) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-analyze-"))
    try:
        directory, written, t = history or tmp, 0, time.perf_counter()
        if history is None or not history.exists():
            written = synthetic_history(directory, rows)
        generate_s = time.perf_counter() - t
        raw_s, raw_cpu, height = _timed_scan(directory, list(SUMMARY_COLUMNS))
        old_s, old_cpu, _ = _timed_scan(directory, [c for c in HISTORY_SCHEMA if c != "value"])
        t, cpu = time.perf_counter(), time.process_time()
        summary = summarize(directory)
        analyze_s, analyze_cpu = time.perf_counter() - t, time.process_time() - cpu
        print(
            f"analyze: {summary.cluster['events']:,}-row synthetic history "
            f"(generated in {generate_s:.1f} s: {written:,} rows; {summary.cluster['pods']:,} pods)"
        )
        print(
            f"  full summary {analyze_s:.2f} s (target <= 5 s), {analyze_cpu:.1f} CPU s (all threads); "
            f"baseline raw polars scan of the {len(SUMMARY_COLUMNS)} columns it reads ({height:,} rows) "
            f"{raw_s:.2f} s, {raw_cpu:.1f} CPU s; ratio summary/baseline = {analyze_s / raw_s:.1f}x wall, "
            f"{analyze_cpu / max(raw_cpu, 1e-9):.1f}x CPU"
        )
        print(f"  (older baseline, every column but value: {old_s:.2f} s, {old_cpu:.1f} CPU s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", nargs="?", default="all", choices=("trace", "analyze", "all"))
    parser.add_argument("--window", default="0:600h")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument(
        "--history", type=Path, default=None, help="analyze: keep the synthetic history here (reused when it exists)"
    )
    args = parser.parse_args()
    if args.what in ("trace", "all"):
        bench_trace(args.window)
    if args.what in ("analyze", "all"):
        bench_analyze(args.rows, args.history)


if __name__ == "__main__":
    main()
