"""Time-based fair share: the usage read from the ledger, KAI's share weights, and a queue that used the cluster
recently getting less of it."""

from __future__ import annotations

from fractions import Fraction

import pytest
import yaml

from kai_stream.core.config import SchedulerConfig, UsageParams, parse_config
from kai_stream.core.events import PodObserved
from kai_stream.core.manifests import load_scenario, object_to_events
from kai_stream.core.scheduler.fairshare import divide
from kai_stream.core.scheduler.framework.info import QueueInfo
from kai_stream.core.scheduler.timeshare import queue_usage, round_weights, usage_shares, window_start
from kai_stream.core.state import fold
from kai_stream.simulate import simulate

from .test_usage import node, pod, removed, tick

HOUR = 3600.0


def queue(name: str, weight: int = 1, quota: int = 0, parent: QueueInfo | None = None) -> QueueInfo:
    q = QueueInfo(
        name=name,
        uid=name,
        parent_name=parent.name if parent else None,
        priority=0,
        created=0.0,
        quota=[quota, 0, 0],
        limit=[-1, -1, -1],
        weight=[weight, 1, 1],
    )
    q.request = [100_000, 0, 0]
    if parent is not None:
        q.parent = parent
        parent.children.append(q)
    return q


def test_usage_share_is_usage_over_capacity_in_the_window() -> None:
    state = fold([node("n1", 10, 0.0), pod("a", "qa", 8, 0.0), pod("b", "qb", 2, 0.0), tick(2 * HOUR)])
    shares = usage_shares(state.usage, UsageParams(), state.now, "default")
    assert shares["qa"][0] == pytest.approx(0.8)
    assert shares["qb"][0] == pytest.approx(0.2)
    one_hour = usage_shares(state.usage, UsageParams(window_size_s=HOUR), state.now, "default")
    assert one_hour == shares, "constant usage: the same share in any window"


def test_sliding_window_forgets_what_is_older() -> None:
    state = fold([node("n1", 10, 0.0), pod("a", "qa", 10, 0.0), removed("a", HOUR), tick(3 * HOUR)])
    assert usage_shares(state.usage, UsageParams(window_size_s=HOUR), state.now, "d") == {"qa": (0.0, 0.0, 0.0)}
    two = usage_shares(state.usage, UsageParams(window_size_s=2.5 * HOUR), state.now, "d")
    assert two["qa"][0] == pytest.approx(0.5 / 2.5)


def test_half_life_weighs_recent_usage_more() -> None:
    early = fold([node("n1", 10, 0.0), pod("a", "qa", 10, 0.0), removed("a", HOUR), tick(2 * HOUR)])
    late = fold([node("n1", 10, 0.0), pod("a", "qa", 10, HOUR), removed("a", 2 * HOUR)])
    params = UsageParams(half_life_period_s=600.0)
    old = usage_shares(early.usage, params, early.now, "d")["qa"][0]
    new = usage_shares(late.usage, params, late.now, "d")["qa"][0]
    flat = usage_shares(late.usage, UsageParams(), late.now, "d")["qa"][0]
    assert flat == pytest.approx(0.5)
    assert old < 0.05 < 0.95 < new


def test_tumbling_window_restarts() -> None:
    params = UsageParams(window_type="tumbling", window_size_s=HOUR, tumbling_window_start_time=0.0)
    assert window_start(params, 2.5 * HOUR) == 2 * HOUR
    state = fold([node("n1", 10, 0.0), pod("a", "qa", 10, 0.0), removed("a", 2 * HOUR), tick(2.5 * HOUR)])
    assert usage_shares(state.usage, params, state.now, "d")["qa"][0] == 0.0


def test_default_queue_and_parents_sum() -> None:
    state = fold([node("n1", 10, 0.0), pod("a", "", 4, 0.0), pod("b", "leaf", 2, 0.0), tick(HOUR)])
    leaf = usage_shares(state.usage, UsageParams(), state.now, "default-queue")
    assert sorted(leaf) == ["default-queue", "leaf"]
    root = queue("root")
    queues = {"root": root, "leaf": queue("leaf", parent=root), "default-queue": queue("default-queue")}
    usage = queue_usage(queues, leaf)
    assert usage["root"][0] == pytest.approx(0.2)
    assert usage["default-queue"][0] == pytest.approx(0.4)


def test_share_weights_are_kais() -> None:
    a, b = queue("a"), queue("b")
    weigh = round_weights({"a": (1.0, 0.0, 0.0)}, 1.0)
    assert weigh([a, b], 0) == {"a": Fraction(0), "b": Fraction(1)}
    half = round_weights({"a": (1.0, 0.0, 0.0)}, 0.5)
    assert half([a, b], 0) == {"a": Fraction(1, 4), "b": Fraction(3, 4)}
    assert divide(16_000, [a, b], 0, round_weights=half) == {"a": 4000, "b": 12000}


@pytest.mark.parametrize("weights", [(3, 1), (1, 1, 1), (5, 2, 7), (1, 0, 2)])
def test_no_usage_divides_as_plain_weights(weights: tuple[int, ...]) -> None:
    queues = [queue(f"q{i}", weight=w, quota=1000 * i) for i, w in enumerate(weights)]
    for total in (7_000, 100_000, 12_345):
        plain = divide(total, queues, 0)
        timed = divide(total, queues, 0, round_weights=round_weights({}, 1.0))
        assert timed == plain


def _scenario(config: SchedulerConfig) -> dict[str, dict[str, float]]:
    """Two queues (deserved 0, weight 1) on 16 GPUs; team-a ran 16 GPUs for an hour, then both ask for 16."""
    base = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {nvidia.com/gpu: "16", cpu: "256", memory: 1Ti}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {resources: {gpu: {quota: 0, overQuotaWeight: 1, limit: -1}}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-b, creationTimestamp: "2026-01-01T00:00:01Z"}
spec: {resources: {gpu: {quota: 0, overQuotaWeight: 1, limit: -1}}}
---
apiVersion: v1
kind: Pod
metadata: {name: big, namespace: t, labels: {kai.scheduler/queue: team-a}}
spec: {schedulerName: kai-scheduler, nodeName: n1, containers: [{name: c, resources: {limits: {nvidia.com/gpu: 16}}}]}
"""
    events = load_scenario(base, ts=1000.0)
    big = next(e for e in events if isinstance(e, PodObserved))
    events.append(removed("big", 1000.0 + HOUR).model_copy(update={"uid": big.pod.uid}))
    for team in ("a", "b"):
        for i in range(16):
            doc = yaml.safe_load(
                f"{{apiVersion: v1, kind: Pod, metadata: {{name: {team}{i}, namespace: t,"
                f" labels: {{kai.scheduler/queue: team-{team}}}}}, spec: {{schedulerName: kai-scheduler,"
                f" containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]}}}}"
            )
            events.extend(object_to_events(doc, ts=1000.0 + HOUR))
    result = simulate(events, config).to_json()
    running: dict[str, float] = {"team-a": 0, "team-b": 0}
    for p in result["pods"].values():
        if p["status"] == "Running" and p["node"] == "n1":
            running[p["queue"]] += 1
    return {
        name: {"fair_share": q["fair_share"]["gpu"], "running": running[name]} for name, q in result["queues"].items()
    }


def test_a_queue_that_used_much_recently_gets_less() -> None:
    plain = _scenario(parse_config({"actions": ["allocate"]}))
    assert plain["team-a"] == plain["team-b"] == {"fair_share": 8.0, "running": 8}
    timed = _scenario(
        parse_config(
            {"actions": ["allocate"], "kValue": 0.5, "usageParams": {"windowSize": "1d", "halfLifePeriod": "30m"}}
        )
    )
    assert timed["team-a"]["fair_share"] < 8.0 < timed["team-b"]["fair_share"]
    assert timed["team-a"]["running"] < 8 < timed["team-b"]["running"]
    off = _scenario(parse_config({"actions": ["allocate"], "kValue": 5}))
    assert off == plain, "k without a usage window changes nothing"


def test_explain_shows_the_usage_term() -> None:
    from kai_stream.explain import queue_standing

    state = fold([node("n1", 10, 0.0), pod("a", "qa", 5, 0.0), tick(HOUR)])
    for name in ("qa", "qb"):
        state = fold(load_scenario(f"""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {name}}}
spec: {{resources: {{gpu: {{quota: 0, overQuotaWeight: 1, limit: -1}}}}}}
""", ts=HOUR), state)
    timed = queue_standing(state, parse_config({"usageParams": {"windowSize": "1d"}}), "default")
    assert timed["qa"].usage_gpu == pytest.approx(0.5)
    assert timed["qb"].usage_gpu == 0.0
    assert queue_standing(state, SchedulerConfig(), "default")["qa"].usage_gpu is None


def test_decisions_with_usage_are_the_same_from_a_restored_state() -> None:
    """A cycle on a state restored from a pickle (the kept snapshot and caches dropped) decides what the live
    state decides: the usage is part of the state, not of a cache."""
    import pickle

    from kai_stream.core.scheduler.cycle import run_cycle

    config = parse_config({"kValue": 1.0, "usageParams": {"windowSize": "1d", "halfLifePeriod": "20m"}})
    base = load_scenario(
        """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", memory: 256Gi}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: qa}
spec: {resources: {gpu: {quota: 0, overQuotaWeight: 1, limit: -1}}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: qb}
spec: {resources: {gpu: {quota: 0, overQuotaWeight: 1, limit: -1}}}
""",
        ts=0.0,
    )
    live = fold(base)
    made: list[str] = []
    for step in range(12):
        ts = 600.0 * (step + 1)
        team = "qa" if step < 6 else "qb"
        doc = yaml.safe_load(
            f"{{apiVersion: v1, kind: Pod, metadata: {{name: p{step}, namespace: t, creationTimestamp:"
            f" '2026-01-01T00:{step:02d}:00Z', labels: {{kai.scheduler/queue: {team}}}}},"
            " spec: {schedulerName: kai-scheduler, containers: [{name: c, resources: {limits: {nvidia.com/gpu: 2}}}]}}"
        )
        for event in object_to_events(doc, ts=ts):
            live = fold([event], live)
        restored = pickle.loads(pickle.dumps(live))
        ours = run_cycle(live, config, pool="default", input_offset=live.offset)
        theirs = run_cycle(restored, config, pool="default", input_offset=restored.offset, reuse=False)
        assert [d.model_dump_json() for d in ours] == [d.model_dump_json() for d in theirs]
        made += [d.type for d in ours]
        live = fold(ours, live)
        for decision in ours:
            if decision.type == "BindRequested":
                pod = live.pods[decision.uid].model_copy(update={"node_name": decision.node, "phase": "Running"})
                live = fold([PodObserved(event_id=f"run-{decision.uid}", ts=ts, pod=pod)], live)
            elif decision.type == "EvictionRequested":
                update = {"uid": decision.uid, "event_id": f"rm-{decision.uid}"}
                gone = removed(decision.name, ts).model_copy(update=update)
                live = fold([gone], live)
    assert "BindRequested" in made and "EvictionRequested" in made, made
    assert live.usage.queues() == ["qa", "qb"]
