"""The HTML report and its PNGs are for people: units by span, percentages, the terminal's labels, no raw keys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from analytics_synthetic import write_history

from kai_stream.analytics import summarize
from kai_stream.analytics.render import cluster_rows
from kai_stream.analytics.report import time_unit, write_report


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
