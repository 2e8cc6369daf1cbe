"""Scenario tests for reclaim, preempt, consolidation, stale gangs, elastic jobs, min-runtime and topology."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from .harness import check, run

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "name",
    [
        "reclaim-equal-deserved.yaml",
        "reclaim-non-preemptible-victim.yaml",
        "reclaim-train-before-build.yaml",
        "preempt-within-queue.yaml",
        "consolidation-move-fraction.yaml",
        "elastic-surplus.yaml",
        "topology-one-rack.yaml",
        "topology-preferred-host.yaml",
        "reclaim-smallest-set.yaml",
        "reclaim-gang-whole-or-nothing.yaml",
        "consolidation-budget.yaml",
        "reclaim-within-department.yaml",
    ],
)
def test_scenario(name: str) -> None:
    result, expect = run(name)
    check(result, expect)


def test_reclaim_eviction_details_carry_fair_share() -> None:
    result, _ = run("reclaim-equal-deserved.yaml")
    evictions = [d for d in result.decisions if d.type == "EvictionRequested"]
    assert evictions and all(d.preemptor in ("ml/a1", "ml/a2") for d in evictions)
    first = evictions[0]
    assert first.details["victim_queue"] == "qb"
    assert first.details["victim_gpu_fair_share"] == "2"
    assert first.details["victim_gpu_allocated"] == "4"
    assert first.details["reclaimer_gpu_fair_share"] == "2"


def test_consolidation_kills_nothing_and_names_the_move() -> None:
    result, _ = run("consolidation-move-fraction.yaml")
    evictions = [d for d in result.decisions if d.type == "EvictionRequested"]
    assert len(evictions) == 1 and evictions[0].details["move_to"]
    moved = evictions[0]
    nominations = [d for d in result.decisions if d.type == "PodPipelined" and d.uid == moved.uid]
    assert nominations and nominations[0].node == moved.details["move_to"] != moved.node
    assert result.evicted == {}


def test_stale_gang_not_evicted_before_grace() -> None:
    result, _ = run("stale-gang.yaml", tick=30.0)
    pods = result.to_json()["pods"]
    assert pods["ml/g-0"]["status"] == pods["ml/g-1"]["status"] == "Running"
    assert not [d for d in result.decisions if d.type == "EvictionRequested"]


def test_stale_gang_evicted_after_grace() -> None:
    result, expect = run("stale-gang.yaml", tick=61.0)
    check(result, expect)


def test_min_runtime_protects_until_it_passes() -> None:
    early, _ = run("min-runtime.yaml", tick=T0 + 12 * 60)
    pods = early.to_json()["pods"]
    assert pods["ml/b1"]["status"] == "Running" and pods["ml/a1"]["status"] == "Pending"
    late, expect = run("min-runtime.yaml", tick=T0 + 16 * 60)
    check(late, expect)


def test_consolidation_within_budget_moves_both_quarters() -> None:
    from kai_stream.core.config import SchedulerConfig
    from kai_stream.simulate import simulate

    from .harness import SCENARIOS, assert_stable, events_of

    config = SchedulerConfig()
    result = simulate(events_of((SCENARIOS / "consolidation-budget.yaml").read_text(), config), config, cycles=20)
    assert_stable(result)
    pods = result.to_json()["pods"]
    assert pods["ml/whole"] == {"status": "Running", "queue": "default-queue", "node": "n1", "gpu_indices": [0]}
    assert {pods["ml/qa"]["node"], pods["ml/qb"]["node"]} == {"n2", "n3"}
    assert sum(1 for d in result.decisions if d.type == "EvictionRequested") == 2
