"""The emulation package: one outcome id scheme (the live binder's), the reactions each policy gives, Kafka's
partitioner without aiokafka, and the core's read-outs for a clock that skips cycles."""

from __future__ import annotations

import math
import random

from aiokafka.partitioner import murmur2 as aiokafka_murmur2

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindRequested,
    EvictionRequested,
    NodeObserved,
    NodeSpec,
    ObservedEvent,
    PodBound,
    PodEvicted,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodRemoved,
    PodSpec,
    QueueObserved,
    QueueSpec,
    ResourceAmounts,
    Resources,
)
from kai_stream.core.quiet import shares_when_idle
from kai_stream.core.state import ClusterState, apply
from kai_stream.emulation import (
    LABEL_RECREATE,
    Completion,
    Finishing,
    Policy,
    bind_failed,
    finished,
    finishes_at,
    pod_bound,
    pod_evicted,
    react,
    recreated_uid,
)
from kai_stream.topicspecs import murmur2, partition_for

_COMMON = {
    "ts": 100.0,
    "input_offset": 3,
    "config_hash": "c",
    "code_version": "t",
    "namespace": "ns",
    "name": "p",
    "uid": "u1",
    "job": "ns/p",
    "queue": "q",
}


def _bind(decision_id: str = "d-1") -> BindRequested:
    return BindRequested(decision_id=decision_id, action="allocate", node="n1", gpu_indices=(0,), **_COMMON)


def _evict(decision_id: str = "d-2", **details: str) -> EvictionRequested:
    return EvictionRequested(decision_id=decision_id, action="reclaim", node="n1", details=details, **_COMMON)


def _state(**pod: object) -> ClusterState:
    state = ClusterState()
    spec = PodSpec(namespace="ns", name="p", uid="u1", queue="q", requests=Resources(gpu_milli=1000), duration_s=50.0,
                   created=1.0, **pod)
    apply(state, PodObserved(event_id="seen", ts=1.0, pod=spec), 1)
    return state


def test_outcome_ids_are_the_live_binders_and_stable() -> None:
    """Ids recorded by live binders before the emulation package existed: a change here breaks their replay."""
    assert pod_bound(_bind("d-1")).event_id == "77155dc8-46ea-5088-a9d5-a999ae11d062"
    assert pod_evicted(_evict("d-2")).event_id == "abd83932-cbd1-5896-a93c-04642de0f0ce"
    again = pod_bound(_bind("d-1"), already=True)
    assert again.event_id == pod_bound(_bind("d-1")).event_id and again.already
    assert bind_failed(_bind("d-1"), "x").event_id != pod_bound(_bind("d-1")).event_id


def test_the_what_if_policy_binds_runs_and_removes() -> None:
    policy = Policy(recreate="never", steps=False, durations=True)
    state = _state()
    bound = react(_bind(), state, policy)
    assert [type(e) for e in bound] == [PodBound, PodObserved]
    running = bound[1]
    assert isinstance(running, PodObserved) and running.pod.phase == "Running" and running.pod.node_name == "n1"
    assert running.pod.started == 100.0
    assert finishes_at(_bind(), state.pods["u1"], policy) == 150.0
    assert finishes_at(_bind(), state.pods["u1"], Policy()) is None
    assert [type(e) for e in react(_evict(), state, policy)] == [PodEvicted, PodRemoved]
    done, removed = finished(running.pod, "d-1", 150.0)
    assert isinstance(done, PodObserved) and done.pod.phase == "Succeeded" and isinstance(removed, PodRemoved)


def test_the_trace_policy_restarts_an_evicted_pod_under_its_uid() -> None:
    policy = Policy(recreate="restart", steps=False, running=False, durations=True)
    state = _state(node_name="n1", phase="Running", started=5.0)
    assert [type(e) for e in react(_bind(), _state(), policy)] == [PodBound]
    evicted, restarted = react(_evict(), state, policy)
    assert isinstance(evicted, PodEvicted) and isinstance(restarted, PodObserved)
    assert restarted.pod.uid == "u1" and restarted.pod.node_name is None and restarted.pod.phase == "Pending"
    assert restarted.pod.started is None


def test_the_simulate_policy_observes_every_step_and_recreates_by_label() -> None:
    state = _state(node_name="n1", phase="Running", started=5.0, labels={LABEL_RECREATE: "true"})
    events = react(_evict(), state, Policy())
    assert [e.type for e in events] == ["PodObserved", "PodEvicted", "PodRemoved", "PodObserved"]
    replacement = events[-1]
    assert isinstance(replacement, PodObserved) and replacement.pod.uid == recreated_uid("u1")
    graceful = react(_evict(), state, Policy(termination_grace=30.0))
    assert [e.type for e in graceful] == ["PodObserved", "PodEvicted", "PodObserved"]
    assert isinstance(graceful[-1], PodObserved) and graceful[-1].pod.terminating
    plain = _state(node_name="n1", phase="Running", started=5.0)
    assert [e.type for e in react(_evict(), plain, Policy())] == ["PodObserved", "PodEvicted", "PodRemoved"]
    moved = react(_evict(move_to="n2"), plain, Policy())
    assert [e.type for e in moved][-1] == "PodObserved"
    bound = react(_bind(), _state(), Policy())
    assert [e.type for e in bound] == ["PodBound", "PodObserved", "PodObserved"]


def test_partition_for_is_kafkas_default_partitioner() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        assert murmur2(data) == aiokafka_murmur2(data) & 0xFFFFFFFF
    for pool in ("default", "pool-a", "*", "gpu-h100", ""):
        assert partition_for(pool, 12) == (aiokafka_murmur2(pool.encode()) & 0x7FFFFFFF) % 12


def test_shares_when_idle_are_the_allocations_of_the_running_pods_in_each_queue_and_below() -> None:
    state = ClusterState()
    node = NodeSpec(name="n1", allocatable=Resources(gpu_milli=8000, cpu_milli=8000, memory=2**30))
    events: list[ObservedEvent] = [NodeObserved(event_id="n1", ts=0.0, node=node)]
    for queue in (QueueSpec(name="root"), QueueSpec(name="q", parent="root"), QueueSpec(name="z")):
        events.append(QueueObserved(event_id=queue.name, ts=0.0, queue=queue))
    events.append(PodGroupObserved(event_id="g", ts=0.0, pod_group=PodGroupSpec(namespace="ns", name="g", queue="q")))
    for i in range(4):
        pod = PodSpec(namespace="ns", name=f"p{i}", uid=f"u{i}", queue="" if i == 2 else "q", pod_group="g",
                      requests=Resources(gpu_milli=1000, cpu_milli=100, memory=10), node_name=None if i == 3 else "n1",
                      gpu_indices=None if i == 3 else (i,), phase="Pending" if i == 3 else "Running")
        events.append(PodObserved(event_id=f"p{i}", ts=0.0, pod=pod))
    for offset, event in enumerate(events):
        apply(state, event, offset)
    expected = {"q": (3000, 300, 30), "root": (3000, 300, 30), "z": (0, 0, 0)}

    def used(pool: str) -> dict[str, tuple[int, int, int]]:
        shares = shares_when_idle(state, SchedulerConfig(), pool=pool)
        assert all(s.fair_share == s.allocated and s.deserved == ResourceAmounts() for s in shares)
        return {s.queue: (s.allocated.gpu_milli, s.allocated.cpu_milli, s.allocated.memory) for s in shares}

    assert list(used("default").items()) == list(expected.items())
    assert used("other") == {name: (0, 0, 0) for name in expected}


def test_a_completion_is_queued_by_its_bind_and_cancelled_by_an_eviction() -> None:
    state = _state()
    finishing = Finishing(Policy(recreate="restart", steps=False, running=False, durations=True))
    assert finishing.react(_bind("d-1"), state) == react(_bind("d-1"), state, finishing.policy)
    finishing.react(_evict("d-2"), state)
    rebind = _bind("d-3").model_copy(update={"ts": 120.0})
    finishing.react(rebind, state)
    assert len(finishing) == 2 and finishing.next_at() == 150.0
    assert finishing.pop() == (150.0, None)
    assert finishing.pop() == (170.0, Completion(170.0, "u1", "d-3"))
    assert finishing.next_at() == math.inf
    untimed = Finishing(Policy())
    untimed.react(_bind("d-1"), state)
    assert len(untimed) == 0
