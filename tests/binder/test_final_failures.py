"""A bind that can never succeed ends at once: a 404 is not retried, its BindFailed says the pod is gone, and
the scheduler forgets the pod instead of deciding the same bind again every cycle."""

from __future__ import annotations

from kai_stream.binder.kube import KubeApplier
from kai_stream.connectors.simcluster import SimCluster
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindFailed,
    BindRequested,
    NodeObserved,
    NodeSpec,
    PodObserved,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
    Tick,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply, fold
from kai_stream.observability import BINDER_RETRIES

from .builders import bind, node
from .test_kube import applier

__all__ = ["applier"]


def _retries() -> float:
    return sum(
        sample.value
        for metric in BINDER_RETRIES.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


async def test_a_missing_pod_fails_once_and_finally(sim: SimCluster, applier: KubeApplier) -> None:
    await sim.create(node("n1"))
    ghost = {"metadata": {"name": "ghost", "namespace": "team-a", "uid": "u-ghost"}}
    before = _retries()
    for fresh in (False, True):
        outcome = await applier.bind(bind(ghost, "n1"), check_first=not fresh)
        assert isinstance(outcome, BindFailed) and outcome.pod_gone and "not found" in outcome.error
    assert [b.code for b in sim.bindings if b.name == "ghost"] == [404]
    assert _retries() == before


def _binds(state: ClusterState) -> list[BindRequested]:
    decisions = run_cycle(state, SchedulerConfig(), pool="default", input_offset=state.offset, code_version="t")
    for decision in decisions:
        apply(state, decision)
    return [d for d in decisions if isinstance(d, BindRequested)]


def test_the_scheduler_does_not_bind_a_gone_pod_again() -> None:
    state = fold(
        [
            NodeObserved(event_id="n", ts=0.0, node=NodeSpec(name="n1", allocatable=Resources(gpu_milli=1000))),
            QueueObserved(event_id="q", ts=0.0, queue=QueueSpec(
                name="q", resources=QueueResources(gpu=QueueResource(quota=-1)))),
            PodObserved(event_id="p", ts=1.0, pod=PodSpec(
                namespace="ns", name="a", uid="ua", queue="q", requests=Resources(gpu_milli=1000))),
        ]
    )
    [decision] = _binds(state)
    failed = BindFailed(
        event_id="f", ts=2.0, decision_id=decision.decision_id, namespace="ns", name="a", uid="ua", node="n1",
        error="pod ns/a not found", pod_gone=True,
    )
    apply(state, failed, state.offset + 1)
    for i in range(3):
        apply(state, Tick(event_id=f"t{i}", ts=3.0 + i), state.offset + 1)
        assert _binds(state) == []
    assert "ua" not in state.pods and "ua" not in state.assumed
