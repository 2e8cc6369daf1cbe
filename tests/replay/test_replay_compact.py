"""The fast history path: ticks and repeated GPU readings decoded by column equal the validator's events, and
replay that folds them as time-only columns rebuilds the same decisions and ends in the same state."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import kai_stream.replay.runner
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    CLUSTER_EVENT,
    ClusterEvent,
    GpuDevice,
    GpuHealthObserved,
    NodeRemoved,
    ObservedEvent,
    PodObserved,
    PodSpec,
    QueueObserved,
    QueueSpec,
    Resources,
    Tick,
    dumps,
)
from kai_stream.core.state import ClusterState, fold
from kai_stream.history.export import write_history
from kai_stream.history.reader import CLUSTER_EVENTS_TOPIC, PoolLog, read_history
from kai_stream.history.schema import event_row, write_segment
from kai_stream.replay.engine import run_engine
from kai_stream.replay.runner import replay_history
from kai_stream.trace.clusters import cluster_events

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "gpu32.yaml"
GPUS = tuple(GpuDevice(index=i, uuid=f"GPU-{i}", memory_mib=40960) for i in range(8))
SICK = tuple(g.model_copy(update={"healthy": False, "reason": "fatal XID 79"}) if g.index == 3 else g for g in GPUS)


def _stream(seconds: int) -> list[ObservedEvent]:
    """Pods arriving, each second's tick *after* them (so cycles run at tick offsets), NVML readings that
    mostly repeat, one GPU failing and recovering."""
    events: list[ObservedEvent] = list(cluster_events(CLUSTER))
    queue = QueueSpec(name="team")
    events.append(QueueObserved(event_id="q", ts=0.0, queue=queue))
    nodes = [f"node-0{i}" for i in range(4)]
    for second in range(1, seconds + 1):
        ts = float(second)
        for n, node in enumerate(nodes):
            if second % 5 == n:
                gpus = SICK if node == "node-01" and 20 <= second < 30 else GPUS
                events.append(GpuHealthObserved(event_id=f"h{second}-{node}", ts=ts, node=node, gpus=gpus))
        if second % 3 == 0:
            pod = PodSpec(
                namespace="team",
                name=f"p{second}",
                uid=f"uid-{second}",
                queue="team",
                requests=Resources(gpu_milli=4000 if second % 2 else 8000, cpu_milli=1000, memory=2**30),
                priority_class="train",
                duration_s=float(7 + second % 11),
                created=ts,
            )
            events.append(PodObserved(event_id=f"p{second}", ts=ts, pod=pod))
        events.append(Tick(event_id=f"t{second}", ts=ts))
    return events


def _oracle(log: PoolLog) -> list[ClusterEvent]:
    return [CLUSTER_EVENT.validate_json(dumps(event)) for event in log.events]


def test_compact_replay_equals_full_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_engine(_stream(90), SchedulerConfig(), tick_cycles=False)
    write_history(tmp_path, [run.log], segment_records=50)

    compact = read_history(tmp_path).pools["default"]
    _, material, timed = compact.parts()
    assert timed is not None and len(timed) > 90 and material
    assert {d.input_offset for d in compact.decisions} & set(timed.offsets), "no cycle ran at a time-only offset"
    report = replay_history(read_history(tmp_path))
    assert report.ok and report.identical == len(run.log.decisions) > 20
    assert report.events == len(run.log.events)
    monkeypatch.setattr(kai_stream.replay.runner, "_BLOCK", 4)  # both workers rebuild cycles
    forked = replay_history(read_history(tmp_path), workers=2)
    assert (forked.ok, forked.identical, forked.events) == (True, report.identical, report.events)
    assert forked.pools["default"].state == report.pools["default"].state

    full = read_history(tmp_path, compact=False)
    assert full.pools["default"].time_only is None
    again = replay_history(full)
    assert again.ok and again.identical == report.identical
    assert report.pools["default"].state == again.pools["default"].state

    events = compact.events
    assert compact.time_only is None
    assert [dumps(e) for e in events] == [dumps(e) for e in run.log.events]
    assert [e.model_fields_set for e in events] == [e.model_fields_set for e in _oracle(compact)]


def test_time_only_fold_with_time_going_back_and_a_removed_node(tmp_path: Path) -> None:
    """Ticks out of time order and a node removed between equal readings: the compact fold ends where
    folding every event does."""
    events: list[ClusterEvent] = list(cluster_events(CLUSTER))
    stamps = [5.0, 9.0, 7.0, 9.0, 3.0, 12.5, 12.0]
    for i, ts in enumerate(stamps):
        events.append(Tick(event_id=f"t{i}", ts=ts))
        events.append(GpuHealthObserved(event_id=f"h{i}", ts=ts - 1, node="node-00", gpus=GPUS))
        if i == 3:
            events.append(NodeRemoved(event_id="gone", ts=ts, name="node-00"))
    events.append(Tick(event_id="last", ts=1.0))
    log = PoolLog("default", events=events, offsets=list(range(len(events))))
    write_history(tmp_path, [log])

    history = read_history(tmp_path)
    timed = history.pools["default"].time_only
    assert timed is not None and len(timed) == len(stamps) + 1  # readings stay events: a node is removed
    state = replay_history(history).pools["default"].state
    expected = fold(events, ClusterState())
    assert (state.offset, state.now) == (expected.offset, expected.now) == (len(events) - 1, 12.5)
    assert state == expected

    no_removal: list[ClusterEvent] = [e for e in events if not isinstance(e, NodeRemoved)]
    write_history(tmp_path / "b", [PoolLog("default", events=no_removal, offsets=list(range(len(no_removal))))])
    history = read_history(tmp_path / "b")
    timed = history.pools["default"].time_only
    assert timed is not None and len(timed) == 2 * len(stamps)  # every reading after the first repeats it
    assert replay_history(history).pools["default"].state == fold(no_removal, ClusterState())


def test_rows_off_the_fast_path_are_validated_and_bad_ones_counted(tmp_path: Path) -> None:
    """Escaped ids, non-canonical JSON, a lying ``type`` column and a broken tick all end as the validator
    decides: decoded alike, or counted as malformed."""
    good: list[ClusterEvent] = [
        Tick(event_id='t"quoted"', ts=1.0),
        Tick(event_id="tü", ts=1.5e-3, pool="p2"),
        Tick(event_id="tiny", ts=1.5e-7),
        GpuHealthObserved(event_id="h\\1", ts=2.0, node="n", gpus=GPUS),
        GpuHealthObserved(event_id="h2", ts=3.25, node="n", gpus=GPUS, utilization_pct=(1.5,)),
        GpuHealthObserved(event_id="h3", ts=4.0, node="n", gpus=GPUS),
    ]
    rows = [event_row(CLUSTER_EVENTS_TOPIC, 0, i, e) for i, e in enumerate(good)]
    spaced = Tick(event_id="spaced", ts=5.0)
    rows.append(event_row(CLUSTER_EVENTS_TOPIC, 0, len(rows), spaced))
    rows[-1]["value"] = orjson.dumps(spaced.model_dump(mode="json"), option=orjson.OPT_INDENT_2).decode()
    liar = Tick(event_id="liar", ts=6.0)
    rows.append(event_row(CLUSTER_EVENTS_TOPIC, 0, len(rows), liar))
    rows[-1]["type"] = "GpuHealthObserved"
    rows.append(event_row(CLUSTER_EVENTS_TOPIC, 0, len(rows), Tick(event_id="broken", ts=7.0)))
    rows[-1]["value"] = rows[-1]["value"].replace('"v":1', '"v":"one","w":2')
    rows.append(event_row(CLUSTER_EVENTS_TOPIC, 0, len(rows), Tick(event_id="late", ts=8.0)))
    write_segment(rows, tmp_path / CLUSTER_EVENTS_TOPIC / "0", "seg")

    for compact in (True, False):
        history = read_history(tmp_path, compact=compact)
        assert history.malformed == 1
        events = [e for log in history.pools.values() for e in log.events]
        expected = [*good, spaced, liar, Tick(event_id="late", ts=8.0)]
        assert sorted(dumps(e) for e in events) == sorted(dumps(e) for e in expected)
        by_id = {e.event_id: e for e in events if isinstance(e, Tick | GpuHealthObserved)}
        for event in expected:
            assert isinstance(event, Tick | GpuHealthObserved)
            decoded = by_id[event.event_id]
            assert decoded == CLUSTER_EVENT.validate_json(dumps(event))
            assert decoded.model_fields_set == CLUSTER_EVENT.validate_json(dumps(event)).model_fields_set
        assert history.pools["p2"].offsets == [1]
