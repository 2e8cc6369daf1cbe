"""Evictions a victim search with fixed candidates (preempt's) leaves for later, while even an upper bound says
the preemptor cannot fit (``solver._Released.may_fit``), change no decision: the cycle gives the same decisions,
byte for byte, as when every unit is evicted as soon as it is taken and checked exactly."""

from __future__ import annotations

import random
from typing import Any

import pytest

import kai_stream.core.scheduler.actions._common.solver as solver
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    AnyEvent,
    NodeObserved,
    NodeSpec,
    PodObserved,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
    dumps,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply

GIB = 2**30


def _state(seed: int, nodes: int = 12, gpus: int = 4) -> ClusterState:
    """One queue; nodes full of running pods, a low-priority 'train' pod (a victim) on some devices and 'build'
    pods on the others, spread or packed by the seed; pending 'inference' pods of 1 to 4 GPUs."""
    rng = random.Random(seed)
    events: list[AnyEvent] = []
    for i in range(nodes):
        spec = NodeSpec(
            name=f"n{i:02d}", allocatable=Resources(gpu_milli=gpus * 1000, cpu_milli=64_000, memory=256 * GIB)
        )
        events.append(NodeObserved(event_id=f"n{i}", ts=0.0, node=spec))
    quota = QueueResources(gpu=QueueResource(quota=-1), cpu=QueueResource(quota=-1), memory=QueueResource(quota=-1))
    events.append(QueueObserved(event_id="q", ts=0.0, queue=QueueSpec(name="q", resources=quota)))
    uid = 0
    for i in range(nodes):
        victims = rng.choice([1, 1, 2, gpus])
        for g in range(gpus):
            uid += 1
            pod = PodSpec(
                namespace="t",
                name=f"run-{uid}",
                uid=f"u{uid}",
                queue="q",
                requests=Resources(gpu_milli=1000, cpu_milli=1000, memory=GIB),
                priority_class="train" if g < victims else "build",
                node_name=f"n{i:02d}",
                gpu_indices=(g,),
                phase="Running",
                created=float(uid),
                started=float(uid),
            )
            events.append(PodObserved(event_id=f"p{uid}", ts=0.0, pod=pod))
    for k in range(6):
        uid += 1
        pod = PodSpec(
            namespace="t",
            name=f"pend-{k}",
            uid=f"u{uid}",
            queue="q",
            requests=Resources(gpu_milli=rng.choice([1, 2, 3, 4]) * 1000, cpu_milli=1000, memory=GIB),
            priority_class="inference",
            created=1000.0 + uid,
        )
        events.append(PodObserved(event_id=f"p{uid}", ts=0.0, pod=pod))
    state = ClusterState()
    for event in events:
        apply(state, event, state.offset + 1)
    return state


def _decisions(state: ClusterState) -> list[bytes]:
    made = run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset, reuse=False)
    return [dumps(d) for d in made]


def _spied(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    answers: list[bool] = []
    real = solver._Released.may_fit

    def spy(*args: Any) -> bool:
        answer = real(*args)
        answers.append(answer)
        return answer

    monkeypatch.setattr(solver._Released, "may_fit", spy)
    return answers


@pytest.mark.parametrize("seed", range(12))
def test_deferred_evictions_change_nothing(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    state = _state(seed)
    answers = _spied(monkeypatch)
    deferred = _decisions(state)
    monkeypatch.setattr(solver._Released, "may_fit", lambda *args: True)
    assert _decisions(state) == deferred
    assert answers


def test_some_evictions_are_never_made(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = _spied(monkeypatch)
    for seed in range(12):
        _decisions(_state(seed))
    assert True in answers and False in answers
