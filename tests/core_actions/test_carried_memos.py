"""The per-job memos a parked snapshot keeps for the next cycle (fields of ``JobInfo``, valid per job version; ``park``
moves the version of every job the cycle touched) hold for the jobs' opening state: a cycle run again on the same
state, its decisions not folded (so no job is rebuilt), decides byte for byte what the first one did and what a
cold cycle decides, although the first cycle placed jobs, tried gangs and evicted, and its later actions read the
memos of jobs allocate had placed."""

from __future__ import annotations

import random

import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import AnyEvent, dumps
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState

from .builders import fold, gang, node_events, pending, queue, running


def _state(seed: int, count: int = 8, gpus: int = 4) -> ClusterState:
    rng = random.Random(seed)
    total = count * gpus * 1000
    events: list[AnyEvent] = node_events(count, gpus)
    events += [queue("a", gpu_quota=total // 2), queue("b", gpu_quota=total // 2)]
    uid = 0
    for i in range(count):
        for g in range(gpus):
            if rng.random() < 0.6:
                uid += 1
                events.append(running(uid, rng.choice("ab"), f"n{i:02d}", g, rng.choice(["train", "build"])))
    for k in range(24):
        uid += 1
        priority_class = rng.choice(["train", "build", "inference"])
        if rng.random() < 0.4:
            events += gang(k, uid, rng.choice("ab"), 2, rng.choice([1, 2]), priority_class)
            uid += 1
        else:
            events.append(pending(k, uid, rng.choice("ab"), rng.choice([1, 2, 4]), priority_class))
    return fold(events)


def _cycle(state: ClusterState, reuse: bool) -> list[bytes]:
    made = run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset, reuse=reuse)
    return [dumps(d) for d in made]


@pytest.mark.parametrize("seed", range(8))
def test_a_repeated_cycle_decides_the_same(seed: int) -> None:
    state = _state(seed)
    cold = _cycle(state, reuse=False)
    first = _cycle(state, reuse=True)
    assert any(b'"BindRequested"' in d for d in first)
    for _ in range(3):
        assert _cycle(state, reuse=True) == first == cold
