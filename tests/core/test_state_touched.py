"""The keys ``state.apply`` reports to parked snapshots, event by event (``framework/reuse.py`` keeps them as its
dirty set): a varied stream of every event kind, each case's branches taken both ways, and the exact set of keys
each event reports. ``None`` stands for "everything" (a queue, priority class, topology or foreign pod changed).
"""

from __future__ import annotations

from typing import Any

from kai_stream.core.events import (
    AnyEvent,
    BindFailed,
    BindRequested,
    EvictionFailed,
    EvictionRequested,
    GpuDevice,
    GpuHealthObserved,
    NodeObserved,
    NodeRemoved,
    NodeSpec,
    PodBound,
    PodEvicted,
    PodGroupObserved,
    PodGroupRemoved,
    PodGroupSpec,
    PodObserved,
    PodPending,
    PodPipelined,
    PodRemoved,
    PodSpec,
    PriorityClassObserved,
    PriorityClassSpec,
    QueueObserved,
    QueueRemoved,
    QueueSpec,
    Resources,
    Tick,
    TopologyObserved,
    TopologySpec,
)
from kai_stream.core.state import NODE_MARK, ClusterState, apply

N0 = NODE_MARK + "n0"


class _Recorder:
    """A parked snapshot that keeps every key reported, per event."""

    def __init__(self) -> None:
        self.reported: set[str | None] = set()

    def touched(self, key: str | None) -> None:
        self.reported.add(key)

    def outgrown(self, touches: int) -> bool:
        return False


def _pod(name: str, group: str | None = None, managed: bool = True, node: str | None = None) -> PodSpec:
    return PodSpec(
        namespace="t",
        name=name,
        uid=name,
        queue="team",
        pod_group=group,
        managed=managed,
        node_name=node,
        phase="Running" if node else "Pending",
        requests=Resources(gpu_milli=1000, cpu_milli=1000, memory=2**30),
    )


def _decision(cls: type[Any], uid: str, **fields: Any) -> Any:
    return cls(
        decision_id=f"d-{uid}-{cls.__name__}",
        ts=1.0,
        input_offset=0,
        config_hash="c",
        code_version="v",
        action="allocate",
        namespace="t",
        name=uid,
        uid=uid,
        job=f"t/{uid}",
        queue="team",
        **fields,
    )


def _outcome(cls: type[Any], uid: str, event_id: str, **fields: Any) -> Any:
    return cls(event_id=event_id, ts=1.0, decision_id=f"d-{uid}", namespace="t", name=uid, uid=uid, **fields)


def _stream() -> list[tuple[AnyEvent, set[str | None]]]:
    node = NodeSpec(name="n0", allocatable=Resources(gpu_milli=8000, cpu_milli=32_000, memory=2**36))
    relabelled = node.model_copy(update={"labels": {"zone": "a"}})
    gpus = (GpuDevice(index=0, uuid="g0", memory_mib=80_000),)
    hot = (GpuDevice(index=0, uuid="g0", memory_mib=80_000, temperature_c=90),)
    sick = (GpuDevice(index=0, uuid="g0", memory_mib=80_000, healthy=False, reason="xid"),)
    group = PodGroupSpec(namespace="t", name="g", queue="team", min_member=2)
    pending = dict(code="NoNodeFits", reason="no node")
    return [
        (NodeObserved(event_id="n0", ts=0.0, node=node), {N0}),
        (NodeObserved(event_id="n0-same", ts=0.0, node=node), set()),
        (NodeObserved(event_id="n0-zone", ts=0.0, node=relabelled), {N0}),
        (GpuHealthObserved(event_id="gpu", ts=0.0, node="n0", gpus=gpus), {N0}),
        (GpuHealthObserved(event_id="gpu-hot", ts=0.0, node="n0", gpus=hot), set()),
        (GpuHealthObserved(event_id="gpu-sick", ts=0.0, node="n0", gpus=sick), {N0}),
        (QueueObserved(event_id="root", ts=0.0, queue=QueueSpec(name="root")), {None}),
        (QueueObserved(event_id="root-same", ts=0.0, queue=QueueSpec(name="root")), set()),
        (QueueObserved(event_id="team", ts=0.0, queue=QueueSpec(name="team", parent="root")), {None}),
        (PodGroupObserved(event_id="g", ts=0.0, pod_group=group), {"t/g"}),
        (PodGroupObserved(event_id="g-same", ts=0.0, pod_group=group), set()),
        (PodObserved(event_id="a", ts=0.0, pod=_pod("a", "g")), {"t/g"}),
        (PodObserved(event_id="a2", ts=0.0, pod=_pod("a2", "g")), {"t/g"}),
        (PodObserved(event_id="b", ts=0.0, pod=_pod("b")), {"t/b"}),
        (PodObserved(event_id="c", ts=0.0, pod=_pod("c")), {"t/c"}),
        (PodObserved(event_id="u", ts=0.0, pod=_pod("u", managed=False, node="n0")), {None}),
        (Tick(event_id="tick", ts=1.0), set()),
        (_decision(BindRequested, "a", node="n0", gpu_indices=(0,)), {"t/g"}),
        (_decision(BindRequested, "ghost", node="n0"), set()),
        (_outcome(PodBound, "a", "bound-a", node="n0", gpu_indices=(0,)), {"t/g"}),
        (_outcome(PodBound, "a", "bound-a-again", node="n0", gpu_indices=(0,)), set()),
        (_decision(PodPipelined, "b", node="n0"), {"t/b"}),
        (_decision(PodPending, "b", **pending), {"t/b"}),
        (_decision(PodPending, "b", code="NoNodeFits", reason="still no node"), set()),
        (_decision(BindRequested, "b", node="n0"), {"t/b"}),
        (_outcome(BindFailed, "b", "bind-b-failed", node="n0", error="conflict"), {"t/b"}),
        (_outcome(BindFailed, "ghost", "bind-ghost-failed", node="n0", error="gone"), set()),
        (_decision(EvictionRequested, "a", preemptor="t/c"), {"t/g"}),
        (_outcome(PodEvicted, "a", "evicted-a"), set()),
        (_outcome(PodEvicted, "a2", "evicted-a2"), {"t/g"}),
        (_outcome(EvictionFailed, "a", "evict-a-failed", error="pdb"), {"t/g"}),
        (_outcome(EvictionFailed, "a", "evict-a-failed-again", error="pdb"), set()),
        (_outcome(EvictionFailed, "a2", "evict-a2-failed", error="pdb"), {"t/g"}),
        (_decision(BindRequested, "c", node="n0"), {"t/c"}),
        (_outcome(BindFailed, "c", "bind-c-gone", node="n0", error="gone", pod_gone=True), {"t/c"}),
        (PodRemoved(event_id="rm-a", ts=2.0, namespace="t", name="a", uid="a"), {"t/g"}),
        (PodRemoved(event_id="rm-ghost", ts=2.0, namespace="t", name="ghost", uid="ghost"), set()),
        (PodRemoved(event_id="rm-u", ts=2.0, namespace="t", name="u", uid="u"), {"t/u", None}),
        (PodGroupRemoved(event_id="g-gone", ts=2.0, namespace="t", name="g"), {"t/g"}),
        (PriorityClassObserved(event_id="pc", ts=2.0, priority_class=PriorityClassSpec(name="p", value=5)), {None}),
        (TopologyObserved(event_id="topo", ts=2.0, topology=TopologySpec(name="racks", levels=("rack",))), {None}),
        (QueueRemoved(event_id="team-gone", ts=2.0, name="team"), {None}),
        (NodeRemoved(event_id="n0-gone", ts=2.0, name="n0"), {N0}),
    ]


def test_every_event_reports_exactly_the_keys_it_touched() -> None:
    state = ClusterState()
    recorder = _Recorder()
    state.derived.parked["default"] = recorder
    reported: list[tuple[str, set[str | None]]] = []
    expected: list[tuple[str, set[str | None]]] = []
    for event, keys in _stream():
        recorder.reported = set()
        assert apply(state, event, state.offset + 1)
        reported.append((type(event).__name__, recorder.reported))
        expected.append((type(event).__name__, keys))
    assert reported == expected


def test_nothing_is_reported_without_a_parked_snapshot() -> None:
    state = ClusterState()
    for event, _ in _stream():
        assert apply(state, event, state.offset + 1)
    assert state.derived.parked == {} and "b" in state.pods and "c" not in state.pods
