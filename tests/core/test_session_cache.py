"""A cycle on a reused snapshot (``run_cycle`` keeps the pool's snapshot in ``ClusterState.derived``) returns
byte for byte what a cold cycle on a fresh copy of the same state returns: every example scenario through the
``simulate`` loop, and random event sequences with the decisions (and some of the cluster's answers) folded back
between cycles. Also: the cache is not part of the state's value and is rebuilt after a copy."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kai_stream.core.decide as decide_module
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    AnyEvent,
    BindFailed,
    BindRequested,
    Decision,
    GpuDevice,
    GpuHealthObserved,
    NodeObserved,
    NodeSpec,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodRemoved,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
    Tick,
    dumps,
)
from kai_stream.core.manifests import load_scenario
from kai_stream.core.scheduler.cycle import fair_shares, run_cycle
from kai_stream.core.scheduler.framework.reuse import Snapshot
from kai_stream.core.state import ClusterState, apply, fold
from kai_stream.emulation import outcome_of
from kai_stream.simulate import simulate

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
GIB = 2**30
REUSED = {"demo", "fair-share", "gang-and-fractions", "reclaim", "topology"}
"""Examples whose second cycle runs on the kept snapshot (the others' running pods have no GPU indices, so a
change on those nodes needs a full build)."""


class Checked:
    """``run_cycle`` that also runs a cold cycle on a deep copy (the copy drops the cache) and compares bytes."""

    def __init__(self) -> None:
        self.cycles = 0
        self.reused = 0

    def __call__(self, state: ClusterState, config: SchedulerConfig, **kw: Any) -> list[Decision]:
        cold = run_cycle(copy.deepcopy(state), config, reuse=False, **kw)
        before = state.derived.parked.get(kw["pool"])
        warm = run_cycle(state, config, **kw)
        self.cycles += 1
        self.reused += before is not None and state.derived.parked.get(kw["pool"]) is before
        assert [dumps(d) for d in warm] == [dumps(d) for d in cold]
        snapshot = state.derived.parked[kw["pool"]]
        assert isinstance(snapshot, Snapshot)
        scanned = {j.key for j in snapshot.base.jobs if any(t.prev_pipelined is not None for t in j.tasks)}
        assert snapshot.builder.nominated == scanned
        return warm


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> Iterator[Checked]:
    check = Checked()
    monkeypatch.setattr(decide_module, "run_cycle", check)
    yield check


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_warm_equals_cold(path: Path, checked: Checked) -> None:
    result = simulate(load_scenario(path.read_text()), SchedulerConfig(), cycles=20)
    assert checked.cycles >= 1 and result.cycles >= 1
    if path.stem in REUSED:
        assert checked.reused >= 1


def test_cache_is_not_part_of_the_state_and_survives_a_copy() -> None:
    state = fold([*_cluster(2, 2), _pod(1, gpus=1), _pod(2, gpus=1)])
    twin = fold([*_cluster(2, 2), _pod(1, gpus=1), _pod(2, gpus=1)])
    first = run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset)
    assert state.derived.parked and state == twin
    clone = copy.deepcopy(state)
    assert not clone.derived.parked and clone == state
    again = run_cycle(clone, SchedulerConfig(), pool="default", input_offset=clone.offset)
    assert [dumps(d) for d in again] == [dumps(d) for d in first]


# ---------------------------------------------------------------------- random event sequences


def _cluster(nodes: int, gpus: int) -> list[AnyEvent]:
    events: list[AnyEvent] = []
    for i in range(nodes):
        node = NodeSpec(name=f"n{i}", allocatable=Resources(gpu_milli=gpus * 1000, cpu_milli=16_000, memory=64 * GIB))
        events.append(NodeObserved(event_id=f"n{i}", ts=0.0, node=node))
    events.append(QueueObserved(event_id="root", ts=0.0, queue=QueueSpec(name="root")))
    for q in range(2):
        res = QueueResources(gpu=QueueResource(quota=1000 * q, over_quota_weight=1 + q))
        spec = QueueSpec(name=f"q{q}", parent="root", resources=res, created=float(q))
        events.append(QueueObserved(event_id=f"q{q}", ts=0.0, queue=spec))
    return events


def _pod(
    i: int, *, gpus: int = 0, frac: int = 0, queue: str = "q0", group: str | None = None, **kw: Any
) -> PodObserved:
    milli = frac or gpus * 1000
    spec = PodSpec(
        namespace="t",
        name=f"p{i}",
        uid=f"u{i}",
        queue=queue,
        pod_group=group,
        requests=Resources(gpu_milli=milli, cpu_milli=1000, memory=GIB),
        gpu_fraction_milli=frac or None,
        created=float(i),
        **kw,
    )
    return PodObserved(event_id=f"p{i}-{kw}", ts=float(i), pod=spec)


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["pod", "pod", "pod", "gang", "finish", "remove", "unhealthy", "readings", "node", "tick", "fail", "queue"]
        ),
        st.integers(0, 7),
        st.sampled_from([0, 1, 2, 500]),
        st.sampled_from(["q0", "q1"]),
        st.sampled_from(["train", "build", "inference"]),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=st.lists(OPS, min_size=2, max_size=6), answer=st.lists(st.booleans(), min_size=8, max_size=8))
def test_random_sequences_warm_equals_cold(
    rounds: list[list[tuple[str, int, int, str, str]]], answer: list[bool]
) -> None:
    state = fold(_cluster(3, 4))
    config = SchedulerConfig()
    check = Checked()
    serial = 100
    for ops in rounds:
        for op, k, size, queue, pclass in ops:
            serial += 1
            live = sorted(uid for uid, p in state.pods.items() if p.phase not in ("Succeeded", "Failed"))
            event: AnyEvent | None = None
            if op == "pod":
                gpus, frac = (0, size) if size == 500 else (size, 0)
                event = _pod(serial, gpus=gpus, frac=frac, queue=queue, priority_class=pclass)
            elif op == "gang":
                group = PodGroupSpec(namespace="t", name=f"g{serial}", queue=queue, min_member=2, priority_class=pclass)
                apply(
                    state, PodGroupObserved(event_id=f"g{serial}", ts=float(serial), pod_group=group), state.offset + 1
                )
                for m in range(2 + k % 2):
                    serial += 1
                    apply(state, _pod(serial, gpus=1, group=f"g{serial - m - 1}", queue=""), state.offset + 1)
            elif op in ("finish", "remove") and live:
                pod = state.pods[live[k % len(live)]]
                if op == "finish":
                    done = pod.model_copy(update={"phase": "Succeeded"})
                    event = PodObserved(event_id=f"f{serial}", ts=float(serial), pod=done)
                else:
                    event = PodRemoved(
                        event_id=f"r{serial}", ts=float(serial), namespace="t", name=pod.name, uid=pod.uid
                    )
            elif op == "unhealthy":
                devices = tuple(GpuDevice(index=g, healthy=g != k % 4) for g in range(4))
                event = GpuHealthObserved(event_id=f"h{serial}", ts=float(serial), node=f"n{k % 3}", gpus=devices)
            elif op == "readings":
                old = state.gpus.get(f"n{k % 3}", tuple(GpuDevice(index=g) for g in range(4)))
                devices = tuple(d.model_copy(update={"utilization_pct": float(serial % 100)}) for d in old)
                event = GpuHealthObserved(event_id=f"u{serial}", ts=float(serial), node=f"n{k % 3}", gpus=devices)
            elif op == "node":
                node = NodeSpec(
                    name=f"n{k % 3}",
                    allocatable=Resources(gpu_milli=4000 if k < 6 else 8000, cpu_milli=16_000, memory=64 * GIB),
                    unschedulable=k % 2 == 0,
                    labels={"zone": f"z{k % 2}"},
                )
                event = NodeObserved(event_id=f"n{serial}", ts=float(serial), node=node)
            elif op == "queue":
                res = QueueResources(gpu=QueueResource(quota=1000 * (k % 3), over_quota_weight=1 + k % 2))
                spec = QueueSpec(name=queue, parent="root", resources=res, created=float(queue[-1]))
                event = QueueObserved(event_id=f"q{serial}", ts=float(serial), queue=spec)
            elif op == "tick":
                event = Tick(event_id=f"t{serial}", ts=float(serial) + 3600 * k)
            elif op == "fail" and state.assumed:
                uid = sorted(state.assumed)[k % len(state.assumed)]
                pod = state.pods[uid]
                assumed = state.assumed[uid]
                event = BindFailed(
                    event_id=f"b{serial}",
                    ts=float(serial),
                    decision_id=assumed.decision_id,
                    namespace=pod.namespace,
                    name=pod.name,
                    uid=uid,
                    node=assumed.node,
                    error="test",
                )
            if event is not None:
                apply(state, event, state.offset + 1)
        assert fair_shares(state, config, "default") == fair_shares(copy.deepcopy(state), config, "default")
        decisions = check(state, config, pool="default", input_offset=state.offset)
        for i, decision in enumerate(decisions):
            apply(state, decision)
            outcome = outcome_of(decision)
            if outcome is not None and (answer[i % len(answer)] or not isinstance(decision, BindRequested)):
                apply(state, outcome, state.offset + 1)
    assert check.cycles == len(rounds)
