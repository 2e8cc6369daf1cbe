"""Every eviction-action scenario log (tests/core_actions/scenarios: reclaim, preempt, consolidation, stale gangs,
elastic jobs, min-runtime, topology) replays identically, run as tests/core_actions runs it: the scenario's own
config, and a ``Tick`` at the event time the action tests use (stale-gang grace, min-runtime limits)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
from core_actions.harness import MAX_CYCLES, SCENARIOS, events_of, split

from kai_stream.core.config import SchedulerConfig, parse_config
from kai_stream.core.events import Decision, EvictionRequested, ObservedEvent
from kai_stream.replay.simulated import replay_simulation
from kai_stream.replay.testing import assert_simulation_replays_identically
from kai_stream.simulate import simulate

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()

# The ticks tests/core_actions uses, so the logs that evict because time has passed are replayed too.
TICKS: dict[str, list[float]] = {
    "stale-gang.yaml": [61.0],  # before the grace (or with no tick) it decides nothing
    "min-runtime.yaml": [T0 + 12 * 60, T0 + 16 * 60],
    "min-runtime-preempt-vs-reclaim.yaml": [T0 + 20 * 60, T0 + 40 * 60, T0 + 5 * 3600],
    "min-runtime-lca-cousin.yaml": [T0 + 20 * 60, T0 + 75 * 60],
    "min-runtime-lca-sibling.yaml": [T0 + 12 * 60, T0 + 20 * 60],
    "min-runtime-never.yaml": [T0 + 10 * 86400],
    "min-runtime-pool-default.yaml": [T0 + 30 * 60, T0 + 75 * 60],
    "min-runtime-elastic-surplus.yaml": [T0 + 20 * 60, T0 + 2 * 3600],
    "min-runtime-lca-both.yaml": [T0 + 20 * 60, T0 + 75 * 60],
}
FILES = sorted(p.name for p in SCENARIOS.glob("*.yaml"))
CASES: list[tuple[str, float | None]] = [(name, None) for name in FILES if name != "stale-gang.yaml"]
CASES += [(name, tick) for name, ticks in sorted(TICKS.items()) for tick in ticks]

# Eviction decisions per action over all the logs above: each eviction action is exercised by some log.
EVICTING_ACTIONS = {"reclaim", "preempt", "consolidation", "stalegangeviction"}


def _run(name: str, tick: float | None) -> tuple[list[ObservedEvent], list[Decision], SchedulerConfig]:
    text = (SCENARIOS / name).read_text()
    config = parse_config(split(text)[1].get("config") or {})
    events = events_of(text, config, tick)
    result = simulate(events, config, cycles=MAX_CYCLES)
    return events, result.decisions, config


def test_every_action_scenario_is_covered() -> None:
    assert len(FILES) >= 22 and set(TICKS) <= set(FILES)


@pytest.mark.parametrize(("name", "tick"), CASES, ids=[f"{n[:-5]}@{t or 0:.0f}" for n, t in CASES])
def test_action_scenario_log_replays_identically(name: str, tick: float | None) -> None:
    events, decisions, config = _run(name, tick)
    assert decisions
    report = assert_simulation_replays_identically(events, decisions, config)
    assert report.identical == report.decisions == len(decisions)


def test_the_replayed_logs_evict_by_every_action() -> None:
    counts: Counter[str] = Counter()
    for name, tick in CASES:
        _, decisions, _ = _run(name, tick)
        counts.update(d.action for d in decisions if isinstance(d, EvictionRequested))
    assert set(counts) >= EVICTING_ACTIONS, counts


def test_a_changed_tick_is_a_divergence() -> None:
    """Replay honours the recorded Tick: the min-runtime log recorded after the limit does not replay from a log
    whose tick is before it (the reclaim would not happen)."""
    _, decisions, config = _run("min-runtime.yaml", T0 + 16 * 60)
    assert any(isinstance(d, EvictionRequested) for d in decisions)
    early = events_of((SCENARIOS / "min-runtime.yaml").read_text(), config, T0 + 12 * 60)
    report = replay_simulation(early, decisions, config)
    assert not report.ok and report.first_divergence is not None
