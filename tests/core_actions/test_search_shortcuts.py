"""Evictions a victim search with fixed candidates (preempt's) leaves for later, while even an upper bound says
the preemptor cannot fit (``solver._Released.may_fit``), change no decision: the cycle gives the same decisions,
byte for byte, as when every unit is evicted as soon as it is taken and checked exactly. The same for reclaim's
tries refused before the reclaimer is placed (``SearchSpec.doomed``), and consolidation's tries skipped while a victim
its last try could not move still finds no free capacity (``_Search._still_blocked``)."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

import kai_stream.core.scheduler.actions._common.solver as solver
import kai_stream.core.scheduler.actions.reclaim as reclaim
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    AnyEvent,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    dumps,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState

from .builders import fold, gang, node_events, pending, queue, running


def _state(seed: int, nodes: int = 12, gpus: int = 4, gangs: bool = False) -> ClusterState:
    """One queue; nodes full of running pods, a low-priority 'train' pod (a victim) on some devices and 'build'
    pods on the others, spread or packed by the seed; pending 'inference' pods of 1 to 4 GPUs (``gangs``: gangs of
    2 or 3 such pods)."""
    rng = random.Random(seed)
    events: list[AnyEvent] = node_events(nodes, gpus)
    events.append(queue("q"))
    uid = 0
    for i in range(nodes):
        victims = rng.choice([1, 1, 2, gpus])
        for g in range(gpus):
            uid += 1
            events.append(running(uid, "q", f"n{i:02d}", g, "train" if g < victims else "build"))
    for k in range(6):
        uid += 1
        if gangs:
            pods = rng.choice([2, 3])
            events.extend(gang(k, uid, "q", pods, rng.choice([1, 2, 3, 4]), "inference"))
            uid += pods
        else:
            events.append(pending(k, uid, "q", rng.choice([1, 2, 3, 4]), "inference"))
    return fold(events)


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


def _departments(seed: int, nodes: int = 24, gpus: int = 8, gangs: bool = False) -> ClusterState:
    """Two departments of three teams; team a-0 holds most GPUs with non-preemptible 'build' pods (department a
    past its deserved quota with them), team a-2 (a GPU limit below what it holds, so over its allocatable share)
    and the teams of department b the rest with 'train' pods. Team a-1's pending 'build' pods (non-preemptible)
    would pass their department's deserved quota and are refused by the job check; the teams of b reclaim (``gangs``:
    their jobs are gangs of 2 pods)."""
    rng = random.Random(seed)
    events: list[AnyEvent] = node_events(nodes, gpus)
    total = nodes * gpus * 1000
    leaves: list[str] = []
    for d in "ab":
        res = QueueResources(gpu=QueueResource(quota=total // 2), cpu=QueueResource(quota=-1))
        events.append(QueueObserved(event_id=f"q{d}", ts=0.0, queue=QueueSpec(name=d, resources=res)))
        for t in range(3):
            name = f"{d}-{t}"
            limit = total // 64 if name == "a-2" else -1
            events.append(queue(name, parent=d, gpu_quota=total // 8, gpu_limit=limit))
            leaves.append(name)
    uid = 0
    for i in range(nodes):
        for g in range(gpus):
            uid += 1
            if rng.random() < 0.6:
                events.append(running(uid, "a-0", f"n{i:02d}", g, "build"))
                continue
            team = "a-2" if rng.random() < 0.5 else rng.choice(leaves[3:])
            events.append(running(uid, team, f"n{i:02d}", g, "train"))
    for k in range(30):
        uid += 1
        team = "a-1" if rng.random() < 0.7 else rng.choice(leaves[3:])
        if team == "a-1":
            events.append(pending(k, uid, team, 1, "build"))
        elif gangs:
            events.extend(gang(k, uid, team, 2, rng.choice([1, 2]), "train"))
            uid += 2
        else:
            events.append(pending(k, uid, team, rng.choice([1, 2, 4]), "train"))
    return fold(events)


@pytest.mark.parametrize("seed", range(4))
def test_doomed_tries_change_nothing(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reclaim's tries refused before placing (``SearchSpec.doomed``) give what placing and validating gave."""
    state = _departments(seed)
    answers: list[bool] = []
    real = reclaim._Reclaim.validator

    def spied(self: reclaim._Reclaim, job: Any, request: list[int]) -> solver.SearchSpec:
        spec = real(self, job, request)
        doomed = spec.doomed
        assert doomed is not None

        def spy(taken: list[Any]) -> bool:
            answer = doomed(taken)
            answers.append(answer)
            return answer

        spec.doomed = spy
        return spec

    monkeypatch.setattr(reclaim._Reclaim, "validator", spied)
    shortcut = _decisions(state)
    monkeypatch.setattr(
        reclaim._Reclaim, "validator", lambda self, job, request: replace(real(self, job, request), doomed=None)
    )
    assert _decisions(state) == shortcut
    # Since the non-preemptible quota check covers every ancestor at the job check (KAI's quota_check.go), a-1's
    # 'build' pods are refused before reclaim searches for them, so the shortcut's tries here all validate: the
    # test proves it refuses nothing that placing and validating would accept.
    assert answers


def _replayed(self: solver._Search, taken: list[Any], kept: list[Any]) -> bool:
    return self.replay(kept)


@pytest.mark.parametrize(("build", "seed"), [(_state, s) for s in range(6)] + [(_departments, s) for s in range(4)])
def test_narrowed_prune_changes_nothing(build: Any, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """An accepted victim set pruned by undoing the dropped units' evictions (``_Search.narrow``, preempt's and
    reclaim's searches) gives what evicting the kept units again from scratch gave. The preemptors are gangs: a
    single-pod preemptor's simulation evicts only the units of one node's victim jobs (``solver._scopes``), which
    leaves nothing to prune."""
    state = build(seed, gangs=True)
    calls: list[int] = []
    real = solver._Search.narrow

    def spy(self: solver._Search, taken: list[Any], kept: list[Any]) -> bool:
        calls.append(len(taken) - len(kept))
        return real(self, taken, kept)

    monkeypatch.setattr(solver._Search, "narrow", spy)
    narrowed = _decisions(state)
    assert calls and min(calls) > 0
    monkeypatch.setattr(solver._Search, "narrow", _replayed)
    assert _decisions(state) == narrowed
