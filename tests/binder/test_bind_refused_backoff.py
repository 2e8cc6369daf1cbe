"""A bind the API server refuses for good (403) is not re-decided every cycle: the scheduler backs the pod off in
event time, so the binding POSTs over N cycles stay bounded (the binder's real applier over HTTP, the pure core,
outcomes folded back as the processor folds them)."""

from __future__ import annotations

import pytest

from kai_stream.binder.kube import KubeApplier
from kai_stream.connectors.simcluster import SimCluster, api_client
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindFailed,
    BindRequested,
    NodeObserved,
    NodeSpec,
    PodObserved,
    PodPending,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
    Tick,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import apply, fold

from .builders import node, pod
from .proxy import Proxy
from .test_kube import FAST

CYCLES = 100
STEP_S = 0.1
REFUSALS = 10**6


async def _refused_binds(sim: SimCluster, proxy: Proxy, config: SchedulerConfig) -> tuple[int, list[str], list[float]]:
    """Run CYCLES cycles, one every STEP_S of event time, binding through ``proxy`` (which refuses every bind with
    403); return how many binding POSTs were made and the pending codes the pod was given."""
    await sim.create(node("n1"))
    created = await sim.create(pod("a"))
    spec = PodSpec(
        namespace="team-a", name="a", uid=created["metadata"]["uid"], queue="q", requests=Resources(gpu_milli=1000)
    )
    state = fold(
        [
            NodeObserved(event_id="n", ts=0.0, node=NodeSpec(name="n1", allocatable=Resources(gpu_milli=8000))),
            QueueObserved(
                event_id="q", ts=0.0, queue=QueueSpec(name="q", resources=QueueResources(gpu=QueueResource(quota=-1)))
            ),
            PodObserved(event_id="p", ts=0.0, pod=spec),
        ]
    )
    proxy.status, proxy.failures = 403, REFUSALS
    codes: list[str] = []
    times: list[float] = []
    async with api_client(proxy.url) as api:
        applier = KubeApplier(api, FAST)
        for i in range(CYCLES):
            apply(state, Tick(event_id=f"t{i}", ts=1.0 + i * STEP_S), state.offset + 1)
            decisions = run_cycle(state, config, pool="default", input_offset=state.offset, code_version="t")
            for decision in decisions:
                apply(state, decision)
                if isinstance(decision, PodPending):
                    codes.append(decision.code)
            for decision in decisions:
                if isinstance(decision, BindRequested):
                    times.append(round(decision.ts, 6))
                    outcome = await applier.bind(decision)
                    assert isinstance(outcome, BindFailed) and "403" in outcome.error and not outcome.pod_gone
                    apply(state, outcome, state.offset + 1)
    return REFUSALS - proxy.failures, codes, times


@pytest.mark.parametrize(
    ("config", "tried_at"),
    [
        (SchedulerConfig(bind_backoff_s=1.0, bind_backoff_max_s=2.0), [1.0, 2.0, 4.0, 6.0, 8.0, 10.0]),
        (SchedulerConfig(), [1.0, 2.0, 4.0, 8.0]),
    ],
    ids=["backoff-1s-cap-2s", "defaults-1s-cap-60s"],
)
async def test_a_forbidden_bind_is_attempted_a_bounded_number_of_times(
    sim: SimCluster, flaky: Proxy, config: SchedulerConfig, tried_at: list[float]
) -> None:
    attempts, codes, times = await _refused_binds(sim, flaky, config)
    assert times == tried_at and attempts == len(tried_at)
    assert codes and set(codes) == {"BindBackoff"}
    assert [b for b in sim.bindings if b.name == "a"] == []


async def test_without_back_off_every_cycle_binds_again(sim: SimCluster, flaky: Proxy) -> None:
    attempts, _, _ = await _refused_binds(sim, flaky, SchedulerConfig(bind_backoff_s=0.0))
    assert attempts == CYCLES
