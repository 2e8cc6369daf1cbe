"""PartitionEngine (pure): per-pool folds, cycles at the last folded offset, chain, ConfigRecorded, rebuild."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    ALL_POOLS,
    ConfigRecorded,
    Decision,
    DecisionsRecord,
    FairShareRecorded,
    ObservedEvent,
    QueueObserved,
    Tick,
    decision_hash,
    stable_id,
)
from kai_stream.core.manifests import load_scenario
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply
from kai_stream.streams.engine import PartitionEngine, is_decision

ROOT = Path(__file__).resolve().parents[2]
CONFIG = SchedulerConfig()


def _engine() -> PartitionEngine:
    return PartitionEngine.for_config(0, CONFIG, "test")


def _scenario() -> list[ObservedEvent]:
    return load_scenario((ROOT / "examples" / "fair-share.yaml").read_text())


def test_cycle_runs_at_last_folded_offset_and_chains() -> None:
    engine = _engine()
    events = _scenario()
    touched: set[str] = set()
    for offset, event in enumerate(events):
        touched.update(engine.fold(offset, event))
    out = engine.cycle(touched)
    assert isinstance(out[0].record, ConfigRecorded)
    assert isinstance(out[-1].record, FairShareRecorded)  # the queues' shares close the cycle's records
    assert {q.queue for q in out[-1].record.queues} == set(engine.pools["default"].state.queues)
    decisions = [cast(Decision, o.record) for o in out[1:-1]]
    assert decisions and all(is_decision(d) for d in decisions)
    reference = ClusterState()
    for offset, event in enumerate(events):
        apply(reference, event, offset)
    expected = run_cycle(reference, CONFIG, pool="default", input_offset=len(events) - 1, code_version="test")
    assert [d.decision_id for d in decisions] == [d.decision_id for d in expected]
    head = ""
    for decision in decisions:
        assert decision.prev_hash == head
        head = decision_hash(decision)
    assert engine.pools["default"].head == head
    assert engine.cycle(["default"]) == []  # same offset: no second cycle


def test_cluster_wide_events_reach_pools_first_seen_later() -> None:
    engine = _engine()
    events = _scenario()
    queues = [e for e in events if e.pool == ALL_POOLS]
    rest = [e for e in events if e.pool != ALL_POOLS]
    offset = 0
    for event in queues:
        assert engine.fold(offset, event) == []
        offset += 1
    for event in rest:
        engine.fold(offset, event)
        offset += 1
    names = sorted(e.queue.name for e in queues if isinstance(e, QueueObserved))
    assert names and sorted(engine.pools["default"].state.queues) == names
    assert engine.fold(3, Tick(event_id="x", ts=1.0)) == []  # re-delivery


def test_rebuild_from_log_and_decisions_does_not_decide_again() -> None:
    first = _engine()
    events = list(enumerate(_scenario()))
    for offset, event in events:
        first.fold(offset, event)
    published = [cast(DecisionsRecord, o.record) for o in first.cycle(["default"])]
    assert len(published) > 1
    head = first.pools["default"].head
    assumed = dict(first.pools["default"].state.assumed)
    assert assumed

    restarted = _engine()
    restarted.rebuild(events, published)
    assert restarted.offset == len(events) - 1
    assert "default" in restarted.config_recorded
    assert restarted.pools["default"].head == head
    assert restarted.pools["default"].state.assumed == assumed
    assert restarted.pools["default"].state.last_pending == first.pools["default"].state.last_pending
    assert restarted.cycle(["default"]) == []

    tick = Tick(event_id=stable_id("t"), ts=5.0, pool="default")
    first.fold(len(events), tick)
    restarted.fold(len(events), tick)
    assert [o.record for o in restarted.cycle(["default"])] == [o.record for o in first.cycle(["default"])]
