"""A real ITP slice simulated end to end: history in the live layout that analyze, replay's reader and the CLI read."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest
from typer.testing import CliRunner

from kai_stream.analytics import summarize
from kai_stream.analytics.frames import lifecycle, pod_rows, scan
from kai_stream.cli import _register, app
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import EvictionRequested, PodObserved, stable_id
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.history.reader import read_history
from kai_stream.history.schema import COLUMNS
from kai_stream.trace.clusters import auto_queue_events, cluster_events
from kai_stream.trace.compare import compare
from kai_stream.trace.loaders import Trace, load_trace
from kai_stream.trace.simulator import _Simulation, simulate_trace

SLICE = Path(__file__).parent / "data" / "itp_cluster07_head80.csv"


@pytest.fixture(scope="module")
def slice_trace() -> Trace:
    return load_trace(SLICE, "itp")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, cluster: Path, slice_trace: Trace) -> Path:
    directory = tmp_path_factory.mktemp("history")
    base = cluster_events(cluster)
    stats = simulate_trace(slice_trace, base + auto_queue_events(base, slice_trace.teams), SchedulerConfig(), directory)
    assert stats.jobs == 80
    assert stats.unfinished_pods == 0
    return directory


def test_every_job_runs_to_completion_within_capacity(history: Path, slice_trace: Trace) -> None:
    summary = summarize(history)
    c = summary.cluster
    assert c["capacity_gpus"] == 32.0
    assert c["jobs"] == 80
    assert c["jobs_completed"] == 80
    assert c["pods_never_bound"] == 0
    assert 0 < c["utilization"] <= 1
    most_allocated = summary.series["cluster"]["allocated"].max()
    assert isinstance(most_allocated, int | float) and most_allocated <= 32_000
    assert c["jct_s"]["avg"] >= float(slice_trace.jobs["duration"].mean())  # type: ignore[arg-type]
    assert {q["queue"] for q in summary.queues} == set(slice_trace.teams)
    assert all(q["avg_fair_share_gpus"] is not None for q in summary.queues)


def test_pods_run_exactly_their_duration(history: Path, slice_trace: Trace) -> None:
    life = lifecycle(pod_rows(scan(history))).filter(pl.col("change") != 0).collect()
    held = life.group_by("uid").agg(
        start=pl.col("ts").filter(pl.col("change") == 1).last(), end=pl.col("ts").filter(pl.col("change") == -1).last()
    )
    pods = (
        scan(history)
        .filter(pl.col("type") == "PodObserved")
        .select("uid", job=pl.col("value").str.json_path_match("$.pod.labels['trace/job-id']"))
        .unique()
        .collect()
    )
    joined = held.join(pods, on="uid").join(slice_trace.jobs.select(job="job_id", duration="duration"), on="job")
    assert joined.height == 80
    assert ((joined["end"] - joined["start"]) == joined["duration"]).all()


def test_history_layout_is_what_the_sink_writes_and_the_reader_reads(history: Path) -> None:
    for topic in ("cluster-events", "decisions", "bind-results"):
        files = sorted((history / topic / "0").glob("*.parquet"))
        assert files, topic
        assert all(len(f.stem.split("-")[0]) == 20 for f in files)
    log = read_history(history).pools["default"]
    assert log.offsets == list(range(len(log.offsets)))
    assert log.configs and log.fair_shares
    binds = sum(1 for d in log.decisions if d.type == "BindRequested")
    evictions = sum(1 for d in log.decisions if d.type == "EvictionRequested")
    assert binds == 80 + evictions
    assert all(d.input_offset <= log.offsets[-1] for d in log.decisions)


def test_cycle_is_the_cores_run_cycle(cluster: Path, slice_trace: Trace) -> None:
    base = cluster_events(cluster)
    sim = _Simulation(
        base + auto_queue_events(base, slice_trace.teams), SchedulerConfig(), pool="default", max_cycles=8
    )
    for i, job in enumerate(slice_trace.jobs.head(60).to_dicts()):
        sim.arrive(i, job, 0.0)
    expected = run_cycle(
        sim.state, SchedulerConfig(), pool="default", input_offset=sim.state.offset, code_version=sim.version
    )
    assert sim.run_cycle() == expected
    assert any(d.type == "PodPending" for d in expected) and any(d.type == "BindRequested" for d in expected)


def test_gangs_and_restart_after_eviction(cluster: Path) -> None:
    jobs = pl.DataFrame(
        {
            "job_id": ["big", "small"],
            "submit": [0.0, 0.0],
            "duration": [100.0, 50.0],
            "gpus": [16, 1],
            "gpu_milli": [8000, 1000],
            "cpu_milli": [0, 0],
            "memory": [0, 0],
            "queue": ["q", "q"],
        }
    )
    base = cluster_events(cluster)
    sim = _Simulation(base + auto_queue_events(base, ["q"]), SchedulerConfig(), pool="default", max_cycles=8)
    sim.arrive(0, jobs.row(0, named=True), 0.0)
    sim.arrive(1, jobs.row(1, named=True), 0.0)
    assert sim.groups[0].min_member == 2
    sim.cycle(0.0)
    assert sum(1 for p in sim.state.pods.values() if p.node_name is not None) == 3
    small = stable_id("trace-pod", "small", "0")
    decisions = [dict(zip(COLUMNS, r, strict=True)) for r in sim.log.rows["decisions"]]
    bind = next(r for r in decisions if r["uid"] == small and r["type"] == "BindRequested")
    eviction = EvictionRequested(
        decision_id="e1",
        ts=10.0,
        input_offset=sim.state.offset,
        config_hash="h",
        code_version="t",
        action="reclaim",
        namespace="trace",
        name="j000001-0",
        uid=small,
        job="trace/j000001",
        queue="q",
        node=bind["node"],
    )
    sim.state.now = 10.0
    assert sim.react(eviction) is True
    assert sim.state.pods[small].node_name is None
    restarted = dict(zip(COLUMNS, sim.log.rows["cluster-events"][-1], strict=True))
    assert restarted["type"] == PodObserved.model_fields["type"].default and restarted["node"] is None
    sim.cycle(10.0)
    assert sim.state.pods[small].node_name is not None
    finishes = []
    while sim.finishing:
        at, done = sim.finishing.pop()
        if done is not None and done.uid == small:
            finishes.append(at)
    assert finishes == [60.0]


def test_compare_policies_side_by_side(cluster: Path, slice_trace: Trace) -> None:
    base = cluster_events(cluster)
    head = Trace(slice_trace.jobs.head(30), slice_trace.source, slice_trace.format)
    rows = compare(head, base, ["kai", "no-reclaim", "fifo"], auto_queues=True)
    assert [r["policy"] for r in rows] == ["kai", "no-reclaim", "fifo"]
    assert all(r["jobs_completed"] == 30 for r in rows)
    assert all(0 < r["utilization"] <= 1 for r in rows)


def test_cli_trace_run_and_analyze_report(tmp_path: Path, cluster: Path) -> None:
    _register()
    runner = CliRunner()
    history = tmp_path / "h"
    result = runner.invoke(
        app,
        [
            "trace",
            "run",
            str(SLICE),
            "--format",
            "itp",
            "--cluster",
            str(cluster),
            "--window",
            "0:3h",
            "--history",
            str(history),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = orjson.loads(result.stdout)
    assert payload["simulation"]["jobs"] == payload["summary"]["cluster"]["jobs"] > 0
    report = tmp_path / "report"
    result = runner.invoke(app, ["analyze", str(history), "--json", "--report", str(report)])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["cluster"]["jobs_completed"] == payload["summary"]["cluster"]["jobs_completed"]
    page = (report / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 3
    assert (report / "cluster_utilization.png").stat().st_size > 1000
    bad = runner.invoke(
        app,
        ["trace", "run", str(SLICE), "--format", "nope", "--cluster", str(cluster), "--history", str(tmp_path / "x")],
    )
    assert bad.exit_code == 2 and "--format" in bad.output


def test_periodic_cycles_bind_only_at_boundaries(tmp_path: Path, cluster: Path, slice_trace: Trace) -> None:
    base = cluster_events(cluster)
    head = Trace(slice_trace.jobs.head(20), slice_trace.source, slice_trace.format)
    stats = simulate_trace(
        head, base + auto_queue_events(base, head.teams), SchedulerConfig(), tmp_path, cycle_every=60
    )
    assert stats.jobs == 20 and stats.unfinished_pods == 0
    binds = scan(tmp_path).filter(pl.col("type") == "BindRequested").select("ts").collect()["ts"]
    assert binds.len() >= 20
    assert (binds % 60 == 0).all()
    assert summarize(tmp_path).cluster["jobs_completed"] == 20
