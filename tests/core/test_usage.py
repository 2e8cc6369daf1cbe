"""The fold's usage ledger: queue usage and capacity integrated over event time, exactly, from events alone."""

from __future__ import annotations

import pickle

import pytest

from kai_stream.core.config import UsageParams, parse_config
from kai_stream.core.events import (
    ClusterEvent,
    NodeObserved,
    NodeRemoved,
    NodeSpec,
    PodObserved,
    PodRemoved,
    PodSpec,
    Resources,
    Tick,
)
from kai_stream.core.state import ClusterState, apply, fold
from kai_stream.core.usage import BUCKET_S, RETAIN_S, UsageLedger

GPU = 1000


def node(name: str, gpus: int, ts: float) -> NodeObserved:
    spec = NodeSpec(name=name, allocatable=Resources(gpu_milli=gpus * GPU, cpu_milli=64_000, memory=2**36))
    return NodeObserved(event_id=f"n-{name}-{ts}", ts=ts, node=spec)


def pod(
    name: str, queue: str, gpus: int, ts: float, node_name: str | None = "n1", phase: str = "Running"
) -> PodObserved:
    spec = PodSpec(
        namespace="t",
        name=name,
        uid=name,
        queue=queue,
        requests=Resources(gpu_milli=gpus * GPU, cpu_milli=1000),
        node_name=node_name,
        phase=phase,
    )
    return PodObserved(event_id=f"p-{name}-{ts}-{phase}", ts=ts, pod=spec)


def removed(name: str, ts: float) -> PodRemoved:
    return PodRemoved(event_id=f"r-{name}-{ts}", ts=ts, namespace="t", name=name, uid=name)


def tick(ts: float) -> Tick:
    return Tick(event_id=f"t-{ts}", ts=ts)


def total(ledger: UsageLedger, queue: str | None, now: float) -> tuple[float, float, float]:
    cells = ledger.integrals(queue, now, 0.0).values()
    return (sum(c[0] for c in cells), sum(c[1] for c in cells), sum(c[2] for c in cells))


def test_usage_is_held_resources_times_event_time() -> None:
    state = fold([node("n1", 8, 100.0), pod("a", "qa", 4, 130.0), pod("b", "qb", 2, 200.0), removed("a", 430.0)])
    ledger = state.usage
    assert total(ledger, "qa", state.now) == (4 * GPU * 300.0, 1000 * 300.0, 0.0)
    assert total(ledger, "qb", state.now) == (2 * GPU * 230.0, 1000 * 230.0, 0.0)
    assert total(ledger, None, state.now)[0] == 8 * GPU * 330.0
    assert ledger.held == {"qb": (2 * GPU, 1000, 0)}
    later = total(ledger, "qb", 1000.0)
    assert later[0] == 2 * GPU * 800.0, "the open segment counts up to the time read"


def test_buckets_split_at_bucket_edges() -> None:
    state = fold([node("n1", 1, 0.0), pod("a", "qa", 1, 30.0), removed("a", 150.0)])
    cells = state.usage.integrals("qa", state.now, 0.0)
    assert cells == {0: (30.0 * GPU, 30_000.0, 0.0), 1: (60.0 * GPU, 60_000.0, 0.0), 2: (30.0 * GPU, 30_000.0, 0.0)}
    assert BUCKET_S == 60.0


def test_only_bound_live_pods_hold() -> None:
    events: list[ClusterEvent] = [
        node("n1", 4, 0.0),
        pod("pending", "qa", 1, 0.0, node_name=None, phase="Pending"),
        pod("done", "qa", 1, 0.0, phase="Succeeded"),
        tick(600.0),
    ]
    state = fold(events)
    assert state.usage.queues() == []
    state = fold([pod("x", "qa", 1, 700.0, phase="Succeeded")], state)
    assert total(state.usage, "qa", 800.0) == (0.0, 0.0, 0.0)


def test_a_pod_that_finishes_stops_counting() -> None:
    state = fold([node("n1", 4, 0.0), pod("a", "qa", 2, 0.0), pod("a", "qa", 2, 60.0, phase="Succeeded"), tick(600.0)])
    assert total(state.usage, "qa", state.now)[0] == 2 * GPU * 60.0


def test_capacity_follows_nodes() -> None:
    state = fold([node("n1", 4, 0.0), node("n2", 2, 60.0), NodeRemoved(event_id="x", ts=120.0, name="n1"), tick(180.0)])
    assert total(state.usage, None, state.now)[0] == GPU * (4 * 60.0 + 6 * 60.0 + 2 * 60.0)


def test_ledger_is_part_of_the_state_and_survives_pickle() -> None:
    events: list[ClusterEvent] = [
        node("n1", 8, 0.0), pod("a", "qa", 4, 10.0), pod("b", "qb", 2, 75.0), removed("a", 200.0)
    ]
    whole = fold(events)
    half = pickle.loads(pickle.dumps(fold(events[:2])))
    fold(events[2:], half)
    assert half.usage == whole.usage
    assert half == whole
    assert fold(events[:3]) != whole


def test_redelivery_changes_nothing() -> None:
    state = ClusterState()
    apply(state, node("n1", 8, 0.0), 0)
    apply(state, pod("a", "qa", 4, 10.0), 1)
    before = pickle.dumps(state.usage)
    apply(state, pod("a", "qa", 4, 10.0), 1)
    assert pickle.dumps(state.usage) == before


def test_old_buckets_are_dropped() -> None:
    far = RETAIN_S + 10 * BUCKET_S
    state = fold([node("n1", 1, 0.0), pod("a", "qa", 1, 0.0), removed("a", far)])
    cells = state.usage.buckets["qa"]
    assert min(cells) >= int(far // BUCKET_S) - int(RETAIN_S // BUCKET_S)
    assert max(cells) == int(far // BUCKET_S) - 1, "the pod left exactly at a bucket edge"


def test_pod_group_queue_is_used_when_the_pod_has_none() -> None:
    from kai_stream.core.events import PodGroupObserved, PodGroupSpec

    group = PodGroupObserved(event_id="g", ts=0.0, pod_group=PodGroupSpec(namespace="t", name="g", queue="qg"))
    spec = PodSpec(
        namespace="t",
        name="m",
        uid="m",
        queue="",
        pod_group="g",
        node_name="n1",
        phase="Running",
        requests=Resources(gpu_milli=GPU),
    )
    state = fold([node("n1", 1, 0.0), group, PodObserved(event_id="m", ts=0.0, pod=spec), tick(60.0)])
    assert state.usage.queues() == ["qg"]


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"usageParams": {"windowSize": "3 days"}}, "usageParams.windowSize"),
        ({"usageParams": {"windowSize": "30d"}}, "usageParams.windowSize"),
        ({"usageParams": {"windowType": "cron"}}, "usageParams.windowType"),
        ({"usageParams": {"windowType": "tumbling"}}, "usageParams"),
        ({"usageParams": {"halfLife": "10m"}}, "usageParams.halfLife"),
        ({"kValue": -1}, "kValue"),
    ],
)
def test_bad_usage_config_names_the_field(given: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=rf"config: {field}\b"):
        parse_config(given)


def test_usage_config_takes_kai_names_and_durations() -> None:
    config = parse_config({"usageParams": {"windowSize": "1w", "halfLifePeriod": "1h30m"}})
    assert config.usage_params == UsageParams(window_size_s=604_800.0, half_life_period_s=5400.0)
    assert config.usage_decay_k == 1.0, "KAI's kValue default once usage is configured"
    assert parse_config({"usage_params": {}, "kValue": 0.25}).usage_decay_k == 0.25
    assert parse_config({"usageParams": {"halfLifePeriod": 0}}).usage_params == UsageParams()
    start = parse_config({"usageParams": {"windowType": "tumbling", "tumblingWindowStartTime": "2026-01-01T00:00:00Z"}})
    assert start.usage_params is not None and start.usage_params.tumbling_window_start_time == 1767225600.0


def test_a_jump_of_years_writes_only_what_is_kept() -> None:
    state = fold([node("n1", 1, 0.0), pod("a", "qa", 1, 0.0), tick(1.8e9), removed("a", 1.8e9 + 30.0)])
    cells = state.usage.buckets["qa"]
    assert len(cells) <= int(RETAIN_S // BUCKET_S) + 1
    assert cells[int((1.8e9 + 30.0) // BUCKET_S)][0] == 30.0 * GPU
