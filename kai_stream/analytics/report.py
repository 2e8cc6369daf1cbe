"""The report: PNG plots (matplotlib, Agg) and one self-contained HTML page with the images embedded.

Plots: cluster GPU allocation and stranded GPUs over time; per queue allocated vs fair share vs deserved
over time (allocation a wide solid line under the dashed fair share and the dotted deserved, so each shows where
they are equal); queueing delay percentiles per queue; pending reasons. ``write_compare_report`` plots policies
side by side for ``trace compare``. Figures are formatted for people: times in the unit their span calls for
(seconds, minutes, hours or days, on axes and in tables), utilization in %, legends outside the data, and the
HTML tables say what the terminal tables say (``render.cluster_rows`` / ``queue_rows``).
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from kai_stream.analytics.render import QUEUE_COLUMNS, cluster_rows, compare_cells, queue_rows
from kai_stream.analytics.summary import Summary

__all__ = ["write_compare_report", "write_report"]


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


_UNITS = (("days", 86_400.0), ("hours", 3600.0), ("minutes", 60.0))


def time_unit(span_s: float) -> tuple[str, float]:
    """The unit (name, seconds) that shows a span of ``span_s`` seconds with readable numbers: days from 2 days,
    hours from 2 hours, minutes from 2 minutes, else seconds."""
    for name, size in _UNITS:
        if span_s >= 2 * size:
            return name, size
    return "seconds", 1.0


def _since(values: list[float], start: float, size: float) -> list[float]:
    return [(v - start) / size for v in values]


def _legend_outside(ax: Any, fontsize: int = 8) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=fontsize, borderaxespad=0.0)


def _cluster_plot(summary: Summary, directory: Path) -> Path | None:
    frame = summary.series.get("cluster")
    if frame is None or frame.height == 0:
        return None
    start = summary.cluster["start_s"]
    times = frame["t"].to_list()
    unit, size = time_unit(max(times) - start if times else 0.0)
    hours = _since(times, start, size)
    fig, ax = plt.subplots(figsize=(11, 4))
    capacity = summary.cluster["capacity_gpus"]
    ax.plot(hours, [v / 1000 for v in frame["allocated"].to_list()], label="allocated GPUs", color="tab:blue")
    ax.plot(
        hours,
        [v / 1000 for v in frame["stranded"].to_list()],
        label="free GPUs stranded on partly used nodes",
        color="tab:orange",
    )
    ax.axhline(capacity, color="black", linestyle="--", linewidth=1, label=f"capacity ({capacity:g} GPUs)")
    ax.set_xlabel(f"{unit} since first submission")
    ax.set_ylabel("GPUs")
    util = summary.cluster["utilization"]
    ax.set_title(f"Cluster GPU allocation (average utilization {100 * (util or 0):.1f} %)")
    ax.set_ylim(bottom=0)
    _legend_outside(ax)
    return _save(fig, directory / "cluster_utilization.png")


def _queue_plot(summary: Summary, directory: Path) -> Path | None:
    alloc = summary.series.get("queue_allocated")
    if alloc is None or alloc.height == 0:
        return None
    queues = sorted(alloc["queue"].unique().to_list())
    shares = summary.series.get("queue_fair_share")
    start = summary.cluster["start_s"]
    times = alloc["t"].to_list()
    unit, size = time_unit(max(times) - start if times else 0.0)
    cols = min(2, len(queues))
    rows = -(-len(queues) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols + 1.5, 2.8 * rows), squeeze=False, sharex=True)
    for i, queue in enumerate(queues):
        ax = axes[i // cols][i % cols]
        part = alloc.filter(alloc["queue"] == queue)
        ax.plot(
            _since(part["t"].to_list(), start, size),
            [v / 1000 for v in part["allocated"].to_list()],
            label="allocated",
            color="tab:blue",
            linewidth=3.5,
            zorder=3,
        )
        if shares is not None:
            fs = shares.filter(shares["queue"] == queue)
            if fs.height:
                hours = _since(fs["t"].to_list(), start, size)
                fair = [v / 1000 for v in fs["fair_share"].to_list()]
                dashed = {"linestyle": (0, (4, 3)), "linewidth": 1.6, "zorder": 4}
                ax.plot(hours, fair, label="fair share", color="tab:green", **dashed)
                deserved = [v / 1000 if v is not None and v >= 0 else float("nan") for v in fs["deserved"].to_list()]
                ax.plot(hours, deserved, label="deserved", color="tab:red", linestyle=":", linewidth=1.5, zorder=5)
        ax.set_title(queue, fontsize=10)
        ax.set_ylabel("GPUs")
        ax.set_ylim(bottom=0)
        if i == cols - 1 or len(queues) == 1:
            _legend_outside(ax, 7)
    for j in range(len(queues), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel(f"{unit} since first submission")
    fig.suptitle("Per queue: allocated vs fair share vs deserved")
    return _save(fig, directory / "queues_fair_share.png")


def _delay_plot(summary: Summary, directory: Path) -> Path | None:
    queues = [q for q in summary.queues if q["queueing_delay_s"]["p50"] is not None]
    if not queues:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.5))
    width = 0.25
    xs = range(len(queues))
    unit, size = time_unit(max(q["queueing_delay_s"]["p99"] or 0.0 for q in queues))
    for k, (key, color) in enumerate((("p50", "tab:blue"), ("p90", "tab:orange"), ("p99", "tab:red"))):
        ax.bar(
            [x + (k - 1) * width for x in xs],
            [(q["queueing_delay_s"][key] or 0.0) / size for q in queues],
            width,
            label=key,
            color=color,
        )
    ax.set_xticks(list(xs), [q["queue"] for q in queues])
    ax.set_ylabel(unit)
    ax.set_title("Queueing delay (submit to bind) per queue")
    _legend_outside(ax)
    return _save(fig, directory / "queueing_delay.png")


def _pending_plot(summary: Summary, directory: Path) -> Path | None:
    if not summary.pending_reasons:
        return None
    reasons = summary.pending_reasons
    fig, ax = plt.subplots(figsize=(7, 1.6 + 0.45 * len(reasons)))
    ax.barh([r["code"] for r in reasons], [r["pods"] for r in reasons], color="tab:purple")
    ax.invert_yaxis()
    ax.set_xlabel("pods given this reason at least once")
    ax.set_title("Pending reasons")
    return _save(fig, directory / "pending_reasons.png")


def _embed(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"></figure>'


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
    "td:first-child,th:first-child{text-align:left}img{max-width:100%}figure{margin:1em 0}"
)


def _page(title: str, sections: list[str]) -> str:
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{''.join(sections)}</body></html>"
    )


def write_report(summary: Summary, directory: str | Path, title: str = "kai-stream history report") -> Path:
    """Write the PNG plots and ``report.html`` (images embedded) under ``directory``; return the page path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    images = [
        p
        for p in (
            _cluster_plot(summary, out),
            _queue_plot(summary, out),
            _delay_plot(summary, out),
            _pending_plot(summary, out),
        )
        if p is not None
    ]
    sections = [
        "<h2>Cluster</h2>",
        _table(["figure", "value"], [list(row) for row in cluster_rows(summary)]),
        "<h2>Queues</h2>",
        "<p>GPUs are time-weighted averages; evictions by action.</p>",
        _table([name for name, _ in QUEUE_COLUMNS], queue_rows(summary, detail=True)),
        "<h2>Pending reasons</h2>",
        _table(
            ["code", "decisions", "pods"],
            [[r["code"], str(r["decisions"]), str(r["pods"])] for r in summary.pending_reasons],
        ),
        "<h2>Plots</h2>",
        *[_embed(p) for p in images],
        *[f"<p><em>note: {html.escape(n)}</em></p>" for n in summary.notes],
    ]
    page = out / "report.html"
    page.write_text(_page(title, sections))
    return page


def write_compare_report(results: list[dict[str, Any]], directory: str | Path) -> Path:
    """Side-by-side bars of the compare metrics per policy, and ``compare.html``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    names = [r["policy"] for r in results]
    times = ("jct_avg_s", "jct_p99_s", "delay_p50_s", "delay_p99_s")
    unit, size = time_unit(max((r[k] or 0.0) for r in results for k in times) if results else 0.0)
    panels = [
        (f"avg JCT ({unit})", [(r["jct_avg_s"] or 0) / size for r in results]),
        (f"p99 JCT ({unit})", [(r["jct_p99_s"] or 0) / size for r in results]),
        (f"p50 queueing delay ({unit})", [(r["delay_p50_s"] or 0) / size for r in results]),
        (f"p99 queueing delay ({unit})", [(r["delay_p99_s"] or 0) / size for r in results]),
        ("GPU utilization (%)", [100 * (r["utilization"] or 0) for r in results]),
        ("Jain index", [r["jain"] or 0 for r in results]),
        ("evictions", [r["evictions"] for r in results]),
    ]
    fig, axes = plt.subplots(2, 4, figsize=(16, 6.5))
    for ax, (label, values) in zip(axes.flat, panels, strict=False):
        ax.bar(names, values, color=[f"C{i}" for i in range(len(names))])
        ax.set_title(label, fontsize=10)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    axes.flat[-1].set_visible(False)
    fig.suptitle("Policy comparison on one trace")
    image = _save(fig, out / "compare.png")
    headers, rows = compare_cells(results)
    page = out / "compare.html"
    page.write_text(_page("kai-stream policy comparison", [_table([name for name, _ in headers], rows), _embed(image)]))
    return page
