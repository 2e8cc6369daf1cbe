"""Rich tables for a ``Summary`` (cluster figures, per-queue figures, pending reasons)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from kai_stream.analytics.fit import Column, fitted_tables
from kai_stream.analytics.summary import Summary

__all__ = ["duration", "moment", "number", "print_summary"]

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


def print_summary(summary: Summary, console: Console | None = None) -> None:
    out = console or Console()
    c: dict[str, Any] = summary.cluster
    cluster = Table(title="Cluster", show_header=False)
    cluster.add_column("figure")
    cluster.add_column("value", justify="right")
    delay, jct = c["queueing_delay_s"], c["jct_s"]
    rows = [
        ("events", f"{c['events']:,}"),
        ("span", f"{c['span_h']:,.1f} h"),
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
    for name, value in rows:
        cluster.add_row(name, value)
    out.print(cluster)

    columns: list[Column] = [
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
    queue_rows: list[list[str]] = []
    for q in summary.queues:
        d = q["queueing_delay_s"]
        queue_rows.append(
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
                str(sum(q["evictions_suffered"].values())),
                str(sum(q["evictions_caused"].values())),
            ]
        )
    for table in fitted_tables("Queues (GPUs are time-weighted averages)", columns, queue_rows, out.width):
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
