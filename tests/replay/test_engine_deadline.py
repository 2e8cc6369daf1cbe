"""The what-if engine sleeps through ticks until the core's next deadline: the same log as a cycle after every
tick, with fewer cycles; the reclaim a min-runtime held back comes at the tick where it expires."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

import kai_stream.replay.engine
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ObservedEvent, PodObserved, PodSpec, QueueObserved, Resources, Tick, dumps
from kai_stream.replay.engine import EngineRun, run_engine
from kai_stream.trace.clusters import auto_queue_events, cluster_events, nodes_yaml


def _events(tmp_path: Path) -> list[ObservedEvent]:
    path = tmp_path / "one-node.yaml"
    path.write_text(yaml.safe_dump_all(nodes_yaml(1, 8, "64", "256Gi"), sort_keys=False))
    nodes = cluster_events(path)
    queues: list[ObservedEvent] = [
        q.model_copy(update={"queue": q.queue.model_copy(update={"reclaim_min_runtime_s": 100.0})})
        for q in auto_queue_events(nodes, ["a", "b"])
        if isinstance(q, QueueObserved)
    ]
    pods: list[ObservedEvent] = []
    for name, queue, ts in (("a0", "a", 0.0), ("a1", "a", 0.0), ("late", "b", 10.0)):
        spec = PodSpec(namespace="ns", name=name, uid=f"u-{name}", queue=queue, created=ts, duration_s=1000.0,
                       requests=Resources(gpu_milli=4000))
        pods.append(PodObserved(event_id=name, ts=ts, pod=spec))
    ticks: list[ObservedEvent] = [Tick(event_id=f"t{t}", ts=float(t)) for t in range(20, 200, 10)]
    return [*nodes, *queues, *pods, *ticks]


def _log(run: EngineRun) -> list[bytes]:
    return [dumps(e) for e in run.log.events] + [dumps(d) for d in run.log.decisions]


def test_ticks_before_the_deadline_run_no_cycle_and_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _events(tmp_path)
    sleeping = run_engine(events, SchedulerConfig(), drain=False)
    with monkeypatch.context() as patch:
        patch.setattr(
            kai_stream.replay.engine, "next_deadline",
            lambda state, config, pool: math.nextafter(state.now, math.inf),
        )
        every = run_engine(events, SchedulerConfig(), drain=False)
    assert _log(sleeping) == _log(every)
    assert sleeping.cycles < every.cycles - 5
    evictions = [d for d in sleeping.log.decisions if d.type == "EvictionRequested"]
    assert evictions and evictions[0].ts == 100.0
