"""Rich tables for a ``Summary`` (cluster figures, per-queue figures, pending reasons)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from kai_stream.analytics.fit import Column, fitted_tables
from kai_stream.analytics.summary import Summary

__all__ = [
    "QUEUE_COLUMNS",
    "cluster_rows",
    "compare_cells",
    "duration",
    "moment",
    "number",
    "print_summary",
    "queue_rows",
]

_EPOCH_FLOOR = 1e9  # 2001-09-09: a smaller timestamp is simulated time from 0 (a trace), not the wall clock


def number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def duration(seconds: float | None) -> str:
    """Seconds as a short human duration (``42s``, ``13.5m``, ``7.2h``, ``3.1d``)."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def moment(ts: float) -> str:
    """An event time for people: ISO 8601 UTC for wall-clock times, ``t+<seconds>`` for simulated ones."""
    if ts < _EPOCH_FLOOR:
        return f"t+{ts:,.1f}s"
    stamp = datetime.fromtimestamp(ts, UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S.") + f"{stamp.microsecond // 100_000}Z"


def _evictions(counts: dict[str, int]) -> str:
    return ", ".join(f"{a} {n}" for a, n in counts.items()) or "0"


def cluster_rows(summary: Summary) -> list[tuple[str, str]]:
    """The cluster figures for people: (name, value with its unit), as the terminal and the HTML report show them."""
    c: dict[str, Any] = summary.cluster
    delay, jct = c["queueing_delay_s"], c["jct_s"]
    return [
        ("events", f"{c['events']:,}"),
        ("span", duration(c["span_h"] * 3600)),
        ("capacity", f"{number(c['capacity_gpus'])} GPUs on {c['nodes']} nodes"),
        ("pods / never bound", f"{c['pods']:,} / {c['pods_never_bound']:,}"),
        ("jobs / completed", f"{c['jobs']:,} / {c['jobs_completed']:,}"),
        ("GPU utilization", number(100 * c["utilization"] if c["utilization"] is not None else None) + " %"),
        ("avg allocated GPUs", number(c["avg_allocated_gpus"])),
        ("avg stranded free GPUs (partly used nodes)", number(c["avg_stranded_gpus"])),
        ("stranded share of free GPUs", number(100 * (c["stranded_share_of_free"] or 0)) + " %"),
        ("queueing delay p50 / p90 / p99", " / ".join(duration(delay[k]) for k in ("p50", "p90", "p99"))),
        ("JCT avg / p50 / p99", " / ".join(duration(jct[k]) for k in ("avg", "p50", "p99"))),
        ("evictions", _evictions(c["evictions_by_action"])),
        ("Jain index (allocated / fair share)", number(c["jain_fairness"], 3)),
    ]


QUEUE_COLUMNS: list[Column] = [
    ("queue", "left"),
    ("pods", "right"),
    ("jobs", "right"),
    ("alloc GPUs", "right"),
    ("fair share", "right"),
    ("deserved", "right"),
    ("delay p50", "right"),
    ("p90", "right"),
    ("p99", "right"),
    ("JCT avg", "right"),
    ("evicted", "right"),
    ("caused", "right"),
]


def queue_rows(summary: Summary, detail: bool = False) -> list[list[str]]:
    """One row per queue under ``QUEUE_COLUMNS``; ``detail``: evictions by action instead of their totals."""
    rows: list[list[str]] = []
    for q in summary.queues:
        d = q["queueing_delay_s"]
        suffered, caused = q["evictions_suffered"], q["evictions_caused"]
        rows.append(
            [
                q["queue"],
                f"{q['pods']:,}",
                f"{q['jobs_completed']:,}",
                number(q["avg_allocated_gpus"]),
                number(q["avg_fair_share_gpus"]),
                number(q["avg_deserved_gpus"]),
                duration(d["p50"]),
                duration(d["p90"]),
                duration(d["p99"]),
                duration(q["jct_s"]["avg"]),
                _evictions(suffered) if detail else str(sum(suffered.values())),
                _evictions(caused) if detail else str(sum(caused.values())),
            ]
        )
    return rows


def compare_cells(results: list[dict[str, Any]]) -> tuple[list[Column], list[list[str]]]:
    """``trace compare``'s rows for people: headers (with alignment) and one row of cells per policy."""
    names = ("policy", "done", "JCT avg", "JCT p99", "delay p50", "delay p99", "util", "Jain", "evictions", "wall")
    headers: list[Column] = [(name, "left" if name == "policy" else "right") for name in names]
    cells = [
        [
            str(r["policy"]),
            f"{r['jobs_completed']:,}",
            duration(r["jct_avg_s"]),
            duration(r["jct_p99_s"]),
            duration(r["delay_p50_s"]),
            duration(r["delay_p99_s"]),
            "-" if r["utilization"] is None else f"{100 * r['utilization']:.1f} %",
            "-" if r["jain"] is None else f"{r['jain']:.3f}",
            str(r["evictions"]),
            f"{r['wall_s']:.1f} s",
        ]
        for r in results
    ]
    return headers, cells


def print_summary(summary: Summary, console: Console | None = None) -> None:
    out = console or Console()
    cluster = Table(title="Cluster", show_header=False)
    cluster.add_column("figure")
    cluster.add_column("value", justify="right")
    for name, value in cluster_rows(summary):
        cluster.add_row(name, value)
    out.print(cluster)

    title = "Queues (GPUs are time-weighted averages)"
    for table in fitted_tables(title, QUEUE_COLUMNS, queue_rows(summary), out.width):
        out.print(table)

    if summary.pending_reasons:
        reasons = Table(title="Pending reasons")
        reasons.add_column("code")
        reasons.add_column("decisions", justify="right")
        reasons.add_column("pods", justify="right")
        for r in summary.pending_reasons:
            reasons.add_row(r["code"], f"{r['decisions']:,}", f"{r['pods']:,}")
        out.print(reasons)
    for note in summary.notes:
        out.print(f"[dim]note: {note}[/dim]", soft_wrap=True)
