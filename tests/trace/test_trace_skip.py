"""Skipping cycles never changes the history: a real ITP slice run with and without skipping, row for row."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ObservedEvent, QueueObserved, Tick
from kai_stream.trace.clusters import auto_queue_events, cluster_events, nodes_yaml
from kai_stream.trace.loaders import Trace, load_trace
from kai_stream.trace.simulator import SimulationStats, _Simulation, simulate_trace

SLICE = Path(__file__).parent / "data" / "itp_cluster07_head80.csv"
TOPICS = ("cluster-events", "decisions", "bind-results")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> list[ObservedEvent]:
    path = tmp_path_factory.mktemp("cluster") / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(nodes_yaml(3, 8, "64", "256Gi"), sort_keys=False))
    return cluster_events(path)


def _history(directory: Path) -> dict[str, pl.DataFrame]:
    return {topic: pl.read_parquet(str(directory / topic / "0" / "*.parquet")).sort("offset") for topic in TOPICS}


def _run(trace: Trace, events: list[ObservedEvent], out: Path, cycle_every: float, skip: bool) -> SimulationStats:
    return simulate_trace(trace, events, SchedulerConfig(), out, cycle_every=cycle_every, skip_cycles=skip)


@pytest.mark.parametrize(
    ("cycle_every", "min_runtime"), [(0.0, None), (600.0, None), (600.0, 5400.0)], ids=["events", "ticks", "minrt"]
)
def test_skipping_gives_the_same_history_byte_for_byte(
    tmp_path: Path, base: list[ObservedEvent], cycle_every: float, min_runtime: float | None
) -> None:
    trace = load_trace(SLICE, "itp")
    trace = Trace(trace.jobs.head(50), trace.source, trace.format)
    queues = auto_queue_events(base, trace.teams)
    if min_runtime is not None:
        queues = [
            q.model_copy(update={"queue": q.queue.model_copy(update={"min_runtime_s": min_runtime})})
            for q in queues
            if isinstance(q, QueueObserved)
        ]
    events = base + queues
    every = _run(trace, events, tmp_path / "every", cycle_every, skip=False)
    skipping = _run(trace, events, tmp_path / "skipping", cycle_every, skip=True)
    assert every.skipped_cycles == 0 and skipping.skipped_cycles > 0
    assert skipping.cycles + skipping.skipped_cycles >= every.cycles
    assert every.evictions > 0 and every.unfinished_pods == 0
    a, b = _history(tmp_path / "every"), _history(tmp_path / "skipping")
    for topic in TOPICS:
        assert a[topic].height > 0
        assert a[topic].equals(b[topic]), topic
        assert "".join(a[topic]["value"]) == "".join(b[topic]["value"])


@pytest.mark.parametrize(
    ("queue_field", "config"),
    [
        ("min_runtime_s", SchedulerConfig()),
        ("reclaim_min_runtime_s", SchedulerConfig()),
        (None, SchedulerConfig(reclaim_min_runtime_s=100.0)),
    ],
    ids=["queue-shorthand", "queue-reclaim", "pool-default"],
)
def test_a_quiet_cycle_is_skipped_until_a_min_runtime_expires(
    tmp_path: Path, queue_field: str | None, config: SchedulerConfig
) -> None:
    path = tmp_path / "one-node.yaml"
    path.write_text(yaml.safe_dump_all(nodes_yaml(1, 8, "64", "256Gi"), sort_keys=False))
    nodes = cluster_events(path)
    update = {queue_field: 100.0} if queue_field else {}
    queues = [
        q.model_copy(update={"queue": q.queue.model_copy(update=update)})
        for q in auto_queue_events(nodes, ["a", "b"])
        if isinstance(q, QueueObserved)
    ]
    sim = _Simulation([*nodes, *queues], config, pool="default", max_cycles=8)
    job = {"duration": 1000.0, "cpu_milli": 0, "memory": 0}
    for i in range(2):
        sim.arrive(i, {**job, "job_id": f"a{i}", "submit": 0.0, "gpus": 4, "gpu_milli": 4000, "queue": "a"}, 0.0)
    sim.cycle(0.0)
    sim.arrive(2, {**job, "job_id": "late", "submit": 10.0, "gpus": 4, "gpu_milli": 4000, "queue": "b"}, 10.0)
    sim.cycle(10.0)
    assert sim.stats.evictions == 0 and sim.quiet_until is None
    sim.observe(Tick(event_id="t20", ts=20.0, pool="default"))
    sim.cycle(20.0)
    assert sim.quiet_until == 100.0
    sim.observe(Tick(event_id="t50", ts=50.0, pool="default"))
    assert not sim.worth_a_cycle(50.0)
    assert sim.run_cycle() == []
    sim.observe(Tick(event_id="t150", ts=150.0, pool="default"))
    assert sim.worth_a_cycle(150.0)
    assert any(d.type == "EvictionRequested" for d in sim.run_cycle())
