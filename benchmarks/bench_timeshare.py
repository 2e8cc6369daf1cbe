"""Time-based fair share against the default on an ITP trace: does a recently idle queue wait less?

Runs ``trace compare`` (policies ``kai`` and ``examples/configs/time-based-fairshare.yaml``) on a window of an ITP
cluster, keeps both histories, and reports per policy the compare row (avg JCT, p99 queueing delay, Jain's index)
and the queueing delay of the pods whose queue held less than its equal share of the cluster (1/teams) on average
over the ``--recent`` hours before the pod was submitted ("recently under-served") against the others'.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_timeshare.py /work/shared/traces/itp/cluster05.csv \\
        --cluster examples/clusters/itp-overquota.yaml --window 0:72h
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import polars as pl

from kai_stream.analytics import frames as F
from kai_stream.core.events import NodeObserved
from kai_stream.trace.clusters import cluster_events
from kai_stream.trace.compare import compare
from kai_stream.trace.loaders import load_trace, parse_window

POLICIES = ["kai", "examples/configs/time-based-fairshare.yaml"]


def pod_delays(history: Path) -> pl.DataFrame:
    """queue, submit, bind, finish, GPUs, delay per pod of a history."""
    lf = F.scan(history)
    per_pod = F.pod_table(F.pod_stream(lf)).collect()
    pods = F.pods(per_pod, pl.DataFrame())
    return pods.select(
        "queue", "submit", "bind", "finish", gpus=pl.col("gpu_milli") / 1000, delay=pl.col("bind") - pl.col("submit")
    ).drop_nulls(["queue", "submit", "bind"])


def under_served(pods: pl.DataFrame, recent_s: float, equal_share_gpus: float) -> list[bool]:
    """Per pod (in ``pods`` order): did its queue hold less than ``equal_share_gpus`` on average in the
    ``recent_s`` before its submission? (the bind-to-finish intervals of the queue's pods, GPU-weighted)."""
    rows = pods.to_dicts()
    end_of_run = max(r["finish"] or r["bind"] for r in rows)
    out = []
    for p in rows:
        lo, hi = p["submit"] - recent_s, p["submit"]
        held = sum(
            o["gpus"] * max(0.0, min(hi, o["finish"] or end_of_run) - max(lo, o["bind"]))
            for o in rows
            if o["queue"] == p["queue"]
        )
        out.append(held / recent_s < equal_share_gpus)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--cluster", type=Path, required=True)
    parser.add_argument("--window", default="0:72h")
    parser.add_argument("--recent", type=float, default=6.0, help="hours of a queue's recent usage to look at")
    args = parser.parse_args()
    jobs = load_trace(args.trace, "itp", window=parse_window(args.window), teams=4)
    base = cluster_events(args.cluster)
    with tempfile.TemporaryDirectory() as tmp:
        rows = compare(jobs, base, POLICIES, auto_queues=True, history_root=Path(tmp))
        for row in rows:
            pods = pod_delays(Path(tmp) / row["policy"])
            gpus = sum(e.node.allocatable.gpu_milli for e in base if isinstance(e, NodeObserved)) / 1000
            pods = pods.with_columns(idle=pl.Series(under_served(pods, args.recent * 3600, gpus / 4)))
            split = pods.group_by("idle").agg(
                pods=pl.len(), avg=pl.col("delay").mean(), p99=pl.col("delay").quantile(0.99)
            )
            print(
                f"{row['policy']}: jobs {row['jobs_completed']}, JCT avg {row['jct_avg_s']:.0f} s, "
                f"delay p99 {row['delay_p99_s']:.0f} s, Jain {row['jain']:.3f}, evictions {row['evictions']}, "
                f"wall {row['wall_s']:.1f} s"
            )
            for r in split.sort("idle").iter_rows(named=True):
                label = "recently under-served queue" if r["idle"] else "other"
                print(f"  {label}: {r['pods']} pods, delay avg {r['avg']:.0f} s, p99 {r['p99']:.0f} s")


if __name__ == "__main__":
    main()
