"""The HTML report and its PNGs are for people: units by span, percentages, the terminal's labels, no raw keys."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from analytics_synthetic import write_history
from matplotlib.image import imread

from kai_stream.analytics import summarize
from kai_stream.analytics.render import cluster_rows
from kai_stream.analytics.report import _queue_plot, time_unit, write_report
from kai_stream.analytics.summary import Summary


@pytest.mark.parametrize(
    ("span", "unit"),
    [(45.0, "seconds"), (119.0, "seconds"), (600.0, "minutes"), (3 * 3600.0, "hours"), (5 * 86_400.0, "days")],
)
def test_time_unit_follows_the_span(span: float, unit: str) -> None:
    assert time_unit(span)[0] == unit


def test_report_html_reads_like_the_terminal(tmp_path: Path) -> None:
    write_history(tmp_path / "history")
    summary = summarize(tmp_path / "history", bins=50)
    page = write_report(summary, tmp_path / "report").read_text()
    text = re.sub(r"<figure>.*?</figure>|<style>.*?</style>", "", page)
    cells = re.findall(r"<td>(.*?)</td>", text)
    assert cells, "the page has tables"
    for name, value in cluster_rows(summary):
        assert f"<td>{name}</td><td>{value}</td>" in text
    assert not [c for c in cells if c in ("None", "nan") or "{" in c], "no None, nan or JSON dicts"
    assert not re.search(r"\b[a-z]+_[a-z_]+\b", " ".join(re.findall(r"<t[dh]>(.*?)</t[dh]>", text))), "no raw keys"
    utilization = summary.cluster["utilization"]
    assert f"{100 * utilization:.1f} %" in text, "utilization in % as in the terminal"
    assert (tmp_path / "report" / "cluster_utilization.png").read_bytes().startswith(b"\x89PNG")


def test_allocation_stays_visible_where_it_equals_the_fair_share(tmp_path: Path) -> None:
    """queues_fair_share.png: the fair-share line was drawn over the allocation line, hiding it where they are equal
    (then only the legend's sample of it was blue: 46 pixels, against 1,725 since)."""
    times = [float(i) for i in range(100)]
    series = {
        "queue_allocated": pl.DataFrame({"t": times, "queue": ["qa"] * 100, "allocated": [2000.0] * 100}),
        "queue_fair_share": pl.DataFrame(
            {"t": times, "queue": ["qa"] * 100, "fair_share": [2000.0] * 100, "deserved": [4000.0] * 100}
        ),
    }
    summary = Summary({"start_s": 0.0}, [], [], [], sample=lambda: series)
    png = _queue_plot(summary, tmp_path)
    assert png is not None
    pixels = imread(png)[..., :3]

    def count(rgb: tuple[float, float, float]) -> int:
        return int((np.abs(pixels - np.array(rgb)).max(axis=2) < 0.08).sum())

    blue, green = count((0.122, 0.467, 0.706)), count((0.173, 0.627, 0.173))
    assert blue > 500 and green > 300, (blue, green)
