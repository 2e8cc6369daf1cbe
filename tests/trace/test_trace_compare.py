"""``trace compare`` on a real ITP slice: every metric is there, and the policies differ where they must
(reclaim only under kai, no evictions without reclaim and consolidation, one queue under fifo, other
placements under spread); the CLI prints the rows as JSON and writes its plots."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from kai_stream.analytics import summarize
from kai_stream.cli import _register, app
from kai_stream.core.events import BindRequested, EvictionRequested, QueueObserved
from kai_stream.history.reader import PoolLog, read_history
from kai_stream.trace.clusters import cluster_events
from kai_stream.trace.compare import FIFO_QUEUE, compare
from kai_stream.trace.loaders import load_trace

SLICE = Path(__file__).parent / "data" / "itp_cluster07_head80.csv"
POLICIES = ["kai", "no-reclaim", "fifo", "binpack", "spread"]
METRICS = {
    "policy", "jobs_completed", "jct_avg_s", "jct_p99_s", "delay_p50_s", "delay_p99_s",
    "utilization", "jain", "evictions", "wall_s",
}  # fmt: skip


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory, cluster: Path) -> tuple[dict[str, dict[str, object]], Path]:
    root = tmp_path_factory.mktemp("compare")
    rows = compare(load_trace(SLICE, "itp"), cluster_events(cluster), POLICIES, auto_queues=True, history_root=root)
    assert [r["policy"] for r in rows] == POLICIES
    return {str(r["policy"]): r for r in rows}, root


def _log(root: Path, policy: str) -> PoolLog:
    return read_history(root / policy).pools["default"]


def _evictions(log: PoolLog) -> Counter[str]:
    return Counter(d.action for d in log.decisions if isinstance(d, EvictionRequested))


def test_every_metric_is_reported_for_every_policy(compared: tuple[dict[str, dict[str, object]], Path]) -> None:
    rows, root = compared
    for policy, row in rows.items():
        assert set(row) == METRICS
        c = summarize(root / policy).cluster  # each column is the analyze figure of the policy's own history
        assert (row["jct_avg_s"], row["jct_p99_s"]) == (c["jct_s"]["avg"], c["jct_s"]["p99"])
        assert (row["delay_p50_s"], row["delay_p99_s"]) == (c["queueing_delay_s"]["p50"], c["queueing_delay_s"]["p99"])
        assert (row["utilization"], row["jain"], row["evictions"]) == (
            c["utilization"],
            c["jain_fairness"],
            c["evictions"],
        )
        assert all(row[k] is not None for k in METRICS), row
        assert row["jobs_completed"] == 80
        assert 0 < row["utilization"] <= 1 and 0 < row["jain"] <= 1  # type: ignore[operator]
        assert row["jct_avg_s"] <= row["jct_p99_s"] and row["delay_p50_s"] <= row["delay_p99_s"]  # type: ignore[operator]


def test_policies_differ_where_they_must(compared: tuple[dict[str, dict[str, object]], Path]) -> None:
    rows, root = compared
    logs = {p: _log(root, p) for p in POLICIES}
    for policy, log in logs.items():  # the row counts what the policy's own history holds
        assert rows[policy]["evictions"] == sum(_evictions(log).values()), policy
    # kai reclaims on this slice; without reclaim nothing is reclaimed (consolidation still moves jobs)
    assert _evictions(logs["kai"])["reclaim"] > 0
    assert "reclaim" not in _evictions(logs["no-reclaim"])
    assert not any(d.action == "reclaim" for d in logs["no-reclaim"].decisions)
    assert rows["no-reclaim"]["delay_p50_s"] > rows["kai"]["delay_p50_s"]  # type: ignore[operator]
    # fifo: allocate only, every job in one queue: no evictions, and fairness over one queue is trivially 1
    assert rows["fifo"]["evictions"] == 0
    assert {e.queue.name for e in logs["fifo"].events if isinstance(e, QueueObserved)} == {FIFO_QUEUE}
    assert {d.queue for d in logs["fifo"].decisions} == {FIFO_QUEUE}
    assert {d.action for d in logs["fifo"].decisions} == {"allocate"}
    assert rows["fifo"]["jain"] == 1.0
    assert len({e.queue.name for e in logs["kai"].events if isinstance(e, QueueObserved)}) == 4
    # binpack is kai's default placement; spread places differently
    metrics = {k for k in METRICS if k != "wall_s"}
    assert {k: rows["binpack"][k] for k in metrics - {"policy"}} == {k: rows["kai"][k] for k in metrics - {"policy"}}

    def places(log: PoolLog) -> list[tuple[str, str]]:
        return [(d.name, d.node) for d in log.decisions if isinstance(d, BindRequested)]

    assert places(logs["binpack"]) == places(logs["kai"]) != places(logs["spread"])


def test_cli_trace_compare_json_and_report(tmp_path: Path, cluster: Path) -> None:
    allocate_only = tmp_path / "allocate-only.yaml"
    allocate_only.write_text("actions: [allocate]\n")
    report = tmp_path / "report"
    _register()
    args = ["trace", "compare", str(SLICE), "--format", "itp", "--cluster", str(cluster)]
    args += ["--configs", f"kai,fifo,{allocate_only}", "--json", "--report", str(report)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = orjson.loads(result.stdout)
    rows = {r["policy"]: r for r in payload["policies"]}
    assert list(rows) == ["kai", "fifo", "allocate-only"]  # a config file is named by its stem
    assert all(set(r) == METRICS for r in rows.values())
    assert rows["kai"]["evictions"] > 0 and rows["allocate-only"]["evictions"] == 0 and rows["fifo"]["evictions"] == 0
    png = (report / "compare.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    page = (report / "compare.html").read_text()
    assert "data:image/png;base64," in page
    assert all(name in page for name in rows) and "JCT p99" in page
    assert "jct_p99_s" not in page and "None" not in page, "headers and cells for people"
