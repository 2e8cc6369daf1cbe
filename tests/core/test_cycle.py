"""run_cycle as the streaming processor uses it: pure, stable ids, folded decisions, health, pipelining."""

from __future__ import annotations

import copy

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindRequested,
    Decision,
    EvictionRequested,
    GpuDevice,
    GpuHealthObserved,
    PodPending,
    PodPipelined,
    stable_id,
)
from kai_stream.core.manifests import load_scenario
from kai_stream.core.scheduler.cycle import fair_shares, run_cycle
from kai_stream.core.state import ClusterState, apply, fold

CONFIG = SchedulerConfig(actions=("allocate",))

NODE = (
    "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{nvidia.com/gpu.memory: '40960'}}}}\n"
    "status: {{allocatable: {{nvidia.com/gpu: '{gpus}', cpu: '64', memory: 256Gi}}}}\n"
)
QUEUE = "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: q}\nspec: {resources: {gpu: {quota: -1}}}\n"


def pod(name: str, gpus: int = 1, annotations: str = "{}", node: str = "", created: int = 0) -> str:
    node_line = f", nodeName: {node}" if node else ""
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: t, annotations: {annotations},"
        f" creationTimestamp: '2026-01-01T00:00:{created:02d}Z', labels: {{kai.scheduler/queue: q}}}}\n"
        f"spec: {{schedulerName: kai-scheduler{node_line}, containers: [{{name: c, resources: {{limits: "
        f"{{nvidia.com/gpu: {gpus}}}}}}}]}}\n"
    )


def scenario(*docs: str) -> ClusterState:
    return fold(load_scenario("---\n".join(docs)))


def cycle(state: ClusterState, pool: str = "default") -> list[Decision]:
    return list(run_cycle(state, CONFIG, pool=pool, input_offset=state.offset))


def fold_decisions(state: ClusterState, decisions: list[Decision]) -> None:
    for d in decisions:
        apply(state, d, state.offset + 1)


def test_run_cycle_does_not_mutate_state_and_ids_are_stable() -> None:
    state = scenario(NODE.format(name="n1", gpus=2), QUEUE, pod("a"), pod("b", gpus=4, created=1))
    before = copy.deepcopy(state)
    decisions = cycle(state)
    assert state == before
    bind = next(d for d in decisions if isinstance(d, BindRequested))
    assert bind.decision_id == stable_id("default", str(state.offset), bind.uid, "BindRequested")
    assert [d.model_dump() for d in decisions] == [d.model_dump() for d in cycle(state)]


def test_unchanged_pending_reason_is_not_emitted_twice() -> None:
    state = scenario(NODE.format(name="n1", gpus=1), QUEUE, pod("big", gpus=2))
    first = cycle(state)
    assert [type(d).__name__ for d in first] == ["PodPending"]
    pending = first[0]
    assert isinstance(pending, PodPending)
    assert pending.code == "NoNodeFits" and pending.predicates == {"InsufficientGPU": 1}
    fold_decisions(state, first)
    assert cycle(state) == []


def test_assumed_placements_hold_their_gpus() -> None:
    state = scenario(NODE.format(name="n1", gpus=2), QUEUE, pod("a"))
    fold_decisions(state, cycle(state))
    assert "a" not in {p.name for p in state.pods.values() if p.node_name}
    for doc in load_scenario("---\n".join([QUEUE, pod("b", created=5)])):
        apply(state, doc, state.offset + 1)
    decisions = cycle(state)
    binds = [d for d in decisions if isinstance(d, BindRequested)]
    assert [(d.name, d.gpu_indices) for d in binds] == [("b", (1,))]


def test_unhealthy_gpus_are_not_placeable() -> None:
    state = scenario(NODE.format(name="n1", gpus=2), QUEUE, pod("a"))
    health = GpuHealthObserved(
        event_id="h", ts=1.0, node="n1", gpus=(GpuDevice(index=0, healthy=False, reason="XID 79"), GpuDevice(index=1))
    )
    apply(state, health, state.offset + 1)
    binds = [d for d in cycle(state) if isinstance(d, BindRequested)]
    assert [d.gpu_indices for d in binds] == [(1,)]
    sick = GpuHealthObserved(
        event_id="h2", ts=2.0, node="n1", gpus=(GpuDevice(index=0, healthy=False), GpuDevice(index=1, healthy=False))
    )
    apply(state, sick, state.offset + 1)
    (pending,) = cycle(state)
    assert isinstance(pending, PodPending)
    assert pending.code == "Unhealthy" and pending.predicates == {"UnhealthyGPU": 1}


def test_gpu_memory_request_becomes_a_fraction_of_that_node() -> None:
    state = scenario(
        NODE.format(name="n1", gpus=1),
        QUEUE,
        pod("m0", gpus=0, annotations="{gpu-memory: '10240'}"),
        pod("m1", gpus=0, annotations="{gpu-memory: '30720'}", created=1),
    )
    binds = [d for d in cycle(state) if isinstance(d, BindRequested)]
    assert [(d.name, d.gpu_indices, d.gpu_fraction_milli) for d in binds] == [("m0", (0,), 250), ("m1", (0,), 750)]


def test_evicting_pods_release_capacity_for_pipelining_once() -> None:
    state = scenario(NODE.format(name="n1", gpus=2), QUEUE, pod("old", gpus=2, node="n1"), pod("new", gpus=2))
    victim = state.pod_by_key("t", "old")
    assert victim is not None
    evict = EvictionRequested(
        decision_id="e",
        ts=1.0,
        input_offset=state.offset,
        config_hash="c",
        code_version="0",
        action="preempt",
        namespace="t",
        name="old",
        uid=victim.uid,
        job="t/old",
        queue="q",
        node="n1",
    )
    apply(state, evict, state.offset + 1)
    decisions = cycle(state)
    assert [(type(d).__name__, getattr(d, "node", None)) for d in decisions] == [("PodPipelined", "n1")]
    assert isinstance(decisions[0], PodPipelined) and decisions[0].waiting_for == ("t/old",)
    fold_decisions(state, decisions)
    assert cycle(state) == []


def test_fair_shares_report_units() -> None:
    state = scenario(NODE.format(name="n1", gpus=4), QUEUE, pod("a", gpus=3))
    assert fair_shares(state, CONFIG, "default") == {"q": {"gpu": 3.0, "cpu": 0.0, "memory": 0.0}}


def test_pools_are_separate_shards() -> None:
    west = NODE.format(name="w1", gpus=1).replace("labels: {", "labels: {kai.scheduler/node-pool: west, ")
    state = scenario(NODE.format(name="n1", gpus=1), west, QUEUE, pod("a"))
    assert [d.node for d in cycle(state) if isinstance(d, BindRequested)] == ["n1"]
    assert cycle(state, pool="west") == []


def test_nominated_node_and_gpus_are_kept() -> None:
    state = scenario(NODE.format(name="n1", gpus=4), NODE.format(name="n2", gpus=4), QUEUE, pod("a"))
    uid = next(iter(state.pods))
    nomination = PodPipelined(
        decision_id="p",
        ts=1.0,
        input_offset=state.offset,
        config_hash="c",
        code_version="0",
        action="consolidation",
        namespace="t",
        name="a",
        uid=uid,
        job="t/a",
        queue="q",
        node="n2",
        gpu_indices=(2,),
    )
    apply(state, nomination, state.offset + 1)
    binds = [d for d in cycle(state) if isinstance(d, BindRequested)]
    assert [(d.node, d.gpu_indices) for d in binds] == [("n2", (2,))]


def test_live_pods_wait_for_their_pod_group_and_a_leaf_queue() -> None:
    events = load_scenario("---\n".join([NODE.format(name="n1", gpus=4), QUEUE, pod("a"), pod("b", created=1)]))
    parent = "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: top}\nspec: {}\n"
    child = "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: q}\nspec: {parentQueue: top}\n"
    state = fold(events)
    a = state.pod_by_key("t", "a")
    b = state.pod_by_key("t", "b")
    assert a is not None and b is not None
    state.pods[a.uid] = a.model_copy(update={"pod_group": "late"})
    state.pods[b.uid] = b.model_copy(update={"queue": "top"})
    for event in load_scenario(parent + "---\n" + child.replace("name: q", "name: leaf")):
        apply(state, event, state.offset + 1)
    decisions = {d.name: d for d in cycle(state)}
    assert isinstance(decisions["a"], PodPending) and decisions["a"].code == "GangIncomplete"
    assert "not observed" in decisions["a"].reason
    assert isinstance(decisions["b"], PodPending) and decisions["b"].code == "UnknownQueue"
