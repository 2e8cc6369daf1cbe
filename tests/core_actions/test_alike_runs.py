"""Runs of alike jobs (``JobsByQueue.next_alike``; allocate, reclaim and consolidation answering a run of jobs of
one class without trying each) change no decision.

A leaf's following job taken without the heap, and the answer of a run's first job given to the jobs of its class
after it, must give the decisions the plain ``requeue``/``pop`` loop and a full try of every job give: the same
events, byte for byte, over every round of a simulation (binds, evictions, pipelining and the rounds after them).
Dropping allocate's or reclaim's class check fails these states; consolidation's is exercised (fewer tries) but
these states have no run where a job of another class would have moved pods.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, cast

import pytest

import kai_stream.core.scheduler.actions.allocate as allocate
import kai_stream.core.scheduler.actions.consolidation as consolidation
import kai_stream.core.scheduler.actions.reclaim as reclaim
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import AnyEvent, ObservedEvent, dumps
from kai_stream.core.scheduler.framework.ordering import JobsByQueue
from kai_stream.simulate import simulate

from .builders import gang, node_events, pending, queue, running

PRIORITY_CLASSES = ["train", "train", "train", "build", "inference"]


def _events(
    seed: int, count: int = 16, gpus: int = 4, busy: float = 0.85, train_only: bool = False
) -> list[ObservedEvent]:
    """Three teams under two departments (one team with a GPU limit, one with a small deserved quota, so that job
    checks refuse some jobs), nodes mostly full, and long runs of pending jobs of few shapes and classes: single
    pods, and gangs of two one-GPU pods that ask what a two-GPU pod asks but fit where it does not."""
    rng = random.Random(seed)
    total = count * gpus * 1000
    events: list[AnyEvent] = node_events(count, gpus)
    events += [
        queue("d1", gpu_quota=total // 2),
        queue("d2", gpu_quota=total // 2),
        queue("a", parent="d1", gpu_quota=total // 4, gpu_limit=total // 2),
        queue("b", parent="d1", gpu_quota=total // 4),
        queue("c", parent="d2", gpu_quota=2000),
    ]
    uid = 0
    for i in range(count):
        for g in range(gpus):
            if rng.random() < 0.85:
                uid += 1
                events.append(running(uid, rng.choice("abc"), f"n{i:02d}", g, rng.choice(PRIORITY_CLASSES)))
    for k in range(60):
        uid += 1
        team, priority_class = rng.choice("aabc"), rng.choice(PRIORITY_CLASSES)
        if rng.random() < 0.3:
            events += gang(k, uid, team, 2, 1, priority_class)
            uid += 1
        else:
            events.append(
                pending(k, uid, team, rng.choice([4, 4, 2] if train_only else [1, 1, 1, 2, 2, 4]), priority_class)
            )
    return cast(list[ObservedEvent], events)


def _fragmented(seed: int, count: int = 12, gpus: int = 4) -> list[ObservedEvent]:
    """Every node one GPU short of full with 'train' pods, and runs of pending 'train' pods that fit only once
    consolidation gathers free GPUs on one node, until the free GPUs are too few."""
    rng = random.Random(seed)
    events: list[AnyEvent] = node_events(count, gpus)
    events += [queue("a"), queue("b")]
    uid = 0
    for i in range(count):
        for g in range(gpus - 1):
            uid += 1
            events.append(running(uid, rng.choice("ab"), f"n{i:02d}", g, "train"))
    for k in range(12):
        uid += 1
        events.append(pending(k, uid, rng.choice("aab"), rng.choice([4, 4, 4, 2]), "train"))
    return cast(list[ObservedEvent], events)


def _decisions(events: list[ObservedEvent]) -> list[bytes]:
    return [dumps(d) for d in simulate(events, SchedulerConfig()).decisions]


STATES = [(_events, seed) for seed in range(10)] + [(_fragmented, seed) for seed in range(4)]


@pytest.mark.parametrize(("build", "seed"), STATES)
def test_runs_of_alike_jobs_change_nothing(
    build: Callable[[int], list[ObservedEvent]], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _compare(build(seed), monkeypatch)


def _compare(events: list[ObservedEvent], monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, int], dict[str, int]]:
    """Decisions with runs and without (asserted equal), and how many jobs each action tried in each."""
    taken: list[bool] = []
    tries: dict[str, int] = {}
    real_next = JobsByQueue.next_alike

    def next_spy(self: JobsByQueue, job: Any) -> Any:
        following = real_next(self, job)
        taken.append(following is not None)
        return following

    for name, cls, method in [
        ("allocate", allocate._Allocator, "allocate_job"),
        ("reclaim", reclaim._Reclaim, "try_job"),
        ("consolidation", consolidation._Consolidation, "try_job"),
    ]:
        real = getattr(cls, method)

        def spy(self: Any, job: Any, real: Any = real, name: str = name) -> Any:
            tries[name] = tries.get(name, 0) + 1
            return real(self, job)

        monkeypatch.setattr(cls, method, spy)
    monkeypatch.setattr(JobsByQueue, "next_alike", next_spy)
    with_runs = _decisions(events)
    tries_with_runs = dict(tries)
    assert True in taken, "no job was taken by next_alike"
    monkeypatch.setattr(JobsByQueue, "next_alike", lambda self, job: None)
    tries.clear()
    assert _decisions(events) == with_runs
    for name in ("allocate", "reclaim", "consolidation"):
        assert tries_with_runs.get(name, 0) <= tries.get(name, 0)
    assert tries_with_runs["allocate"] < tries["allocate"], "allocate tried every job of every run"
    return tries_with_runs, tries


def test_each_action_answers_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the seeds, reclaim and consolidation also answer some jobs from their run's first job."""
    fewer = {"reclaim": False, "consolidation": False}
    for build, seed in STATES:
        with monkeypatch.context() as patch:
            with_runs, without = _compare(build(seed), patch)
        for name in fewer:
            fewer[name] |= with_runs.get(name, 0) < without.get(name, 0)
    assert fewer == {"reclaim": True, "consolidation": True}
