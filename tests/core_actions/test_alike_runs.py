"""Runs of alike jobs (``JobsByQueue.next_alike``, allocate's shared failures) change no decision.

A leaf's following job taken without the heap, and allocate's reason given to a run of jobs of one class without
trying each, must give the decisions the plain ``requeue``/``pop`` loop and a full try of every job give: the same
events, byte for byte, over every round of a simulation (binds, evictions, pipelining and the rounds after them).
"""

from __future__ import annotations

import random
from typing import Any, cast

import pytest

import kai_stream.core.scheduler.actions.allocate as allocate
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import AnyEvent, ObservedEvent, dumps
from kai_stream.core.scheduler.framework.ordering import JobsByQueue
from kai_stream.simulate import simulate

from .builders import gang, node_events, pending, queue, running

PRIORITY_CLASSES = ["train", "train", "train", "build", "inference"]


def _events(seed: int, count: int = 16, gpus: int = 4) -> list[ObservedEvent]:
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
            events.append(pending(k, uid, team, rng.choice([1, 1, 1, 2, 2, 4]), priority_class))
    return cast(list[ObservedEvent], events)


def _decisions(events: list[ObservedEvent]) -> list[bytes]:
    return [dumps(d) for d in simulate(events, SchedulerConfig()).decisions]


@pytest.mark.parametrize("seed", range(10))
def test_runs_of_alike_jobs_change_nothing(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _events(seed)
    taken: list[bool] = []
    tries: list[int] = [0]
    real_next, real_try = JobsByQueue.next_alike, allocate._Allocator.allocate_job

    def next_spy(self: JobsByQueue, job: Any) -> Any:
        following = real_next(self, job)
        taken.append(following is not None)
        return following

    def try_spy(self: allocate._Allocator, job: Any) -> Any:
        tries[0] += 1
        return real_try(self, job)

    monkeypatch.setattr(allocate._Allocator, "allocate_job", try_spy)
    monkeypatch.setattr(JobsByQueue, "next_alike", next_spy)
    with_runs = _decisions(events)
    tries_with_runs = tries[0]
    assert True in taken, "no job was taken by next_alike"
    monkeypatch.setattr(JobsByQueue, "next_alike", lambda self, job: None)
    tries[0] = 0
    assert _decisions(events) == with_runs
    assert tries_with_runs < tries[0], "allocate tried every job of every run"
