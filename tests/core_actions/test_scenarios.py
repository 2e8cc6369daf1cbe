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
        "topology-unlabelled-nodes.yaml",
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


def _statuses(name: str, tick: float) -> dict[str, str]:
    result, _ = run(name, tick=tick)
    return {key: pod["status"] for key, pod in result.to_json()["pods"].items()}


def test_min_runtime_preempt_and_reclaim_limits_are_separate() -> None:
    # 30 minutes in: past qb's reclaimMinRuntime (15m), not past its preemptMinRuntime (4h).
    result, expect = run("min-runtime-preempt-vs-reclaim.yaml", tick=T0 + 40 * 60)
    check(result, expect)
    # 10 minutes in: reclaim is still blocked too.
    early = _statuses("min-runtime-preempt-vs-reclaim.yaml", T0 + 20 * 60)
    assert [early[k] for k in ("ml/a1", "ml/b1", "ml/b2", "ml/b-build")] == ["Pending", "Running", "Running", "Pending"]
    # past 4h: preempt is allowed as well, and the build job takes the remaining train job.
    late = _statuses("min-runtime-preempt-vs-reclaim.yaml", T0 + 5 * 3600)
    assert late["ml/b-build"] == "Running" and late["ml/b1"] == late["ml/b2"] == "Evicted"


def test_min_runtime_reclaim_from_a_cousin_resolves_below_the_common_ancestor() -> None:
    # org is the common ancestor: dept-a's 1h holds, q-victim's own 5m does not.
    early = _statuses("min-runtime-lca-cousin.yaml", T0 + 20 * 60)
    assert early["ml/v1"] == "Running" and early["ml/c1"] == "Pending"
    result, expect = run("min-runtime-lca-cousin.yaml", tick=T0 + 75 * 60)
    check(result, expect)


def test_min_runtime_reclaim_from_a_sibling_resolves_from_the_victim_leaf() -> None:
    # dept-a is the common ancestor: q-victim's own 5m holds, not dept-a's 1h.
    early = _statuses("min-runtime-lca-sibling.yaml", T0 + 12 * 60)
    assert early["ml/v1"] == "Running" and early["ml/s1"] == "Pending"
    result, expect = run("min-runtime-lca-sibling.yaml", tick=T0 + 20 * 60)
    check(result, expect)


def test_min_runtime_minus_one_never_reclaimed() -> None:
    result, expect = run("min-runtime-never.yaml", tick=T0 + 10 * 86400)
    check(result, expect)


def test_min_runtime_pool_default_from_the_config() -> None:
    early = _statuses("min-runtime-pool-default.yaml", T0 + 30 * 60)
    assert early["ml/b1"] == "Running" and early["ml/a1"] == "Pending"
    result, expect = run("min-runtime-pool-default.yaml", tick=T0 + 75 * 60)
    check(result, expect)


def test_min_runtime_protected_elastic_job_gives_only_its_surplus() -> None:
    result, expect = run("min-runtime-elastic-surplus.yaml", tick=T0 + 20 * 60)
    check(result, expect)


def test_min_runtime_unprotected_elastic_job_loses_its_core_too() -> None:
    """The contrast for the scenario above: once the limit has passed, the gang core is reclaimed as well."""
    late = _statuses("min-runtime-elastic-surplus.yaml", T0 + 2 * 3600)
    assert {late[f"ml/el-{i}"] for i in range(4)} == {"Evicted"}
    assert [late[f"ml/a{i}"] for i in range(1, 5)] == ["Running"] * 4


def test_min_runtime_sibling_and_cousin_reclaimers_in_one_cycle() -> None:
    """One action run, two reclaimer leaves resolving to different limits for the same victim queue."""
    result, expect = run("min-runtime-lca-both.yaml", tick=T0 + 20 * 60)
    check(result, expect)
    late = _statuses("min-runtime-lca-both.yaml", T0 + 75 * 60)
    assert late["ml/c1"] == late["ml/s1"] == "Running" and late["ml/v1"] == late["ml/v2"] == "Evicted"
