"""Who evicted me: a reclaim applied by the binder leaves, on the evicted pod, the ``DisruptionTarget`` condition
(reason ``PreemptionByScheduler``, naming the action, the preemptor and its queue) and core/v1 Events on the pod
and its PodGroup; read back over HTTP with kubernetes-asyncio from the simulated cluster, while the pod is still
terminating."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from kai_stream.binder.kube import KubeApplier, RetryPolicy
from kai_stream.connectors.simcluster import SimCluster, api_client
from kai_stream.core.events import PodBound, PodEvicted

from .builders import bind, evict, node, pod, pod_group


@pytest.fixture
async def slow_sim() -> AsyncIterator[SimCluster]:
    """Evicted pods stay terminating for 30 s (the Kubernetes default grace), long enough to read them."""
    cluster = SimCluster(time_scale=1.0, termination_grace=30.0)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


async def test_reclaimed_pod_says_who_evicted_it(slow_sim: SimCluster) -> None:
    assert slow_sim.url is not None
    async with api_client(slow_sim.url) as api:
        applier = KubeApplier(api, RetryPolicy(attempts=3, base_delay_s=0.01))
        core = client.CoreV1Api(api)
        await slow_sim.create(node("n1"))
        await slow_sim.create(pod_group("train"))
        victim = await slow_sim.create(pod("victim", group="train"))
        assert isinstance(await applier.bind(bind(victim, "n1", gpus=(0,))), PodBound)

        decision = evict(victim).model_copy(update={
            "action": "reclaim", "preemptor": "team-a/a1", "preemptor_queue": "qa",
            "reason": "reclaimed for team-a/a1 (queue qa within fair share)",
        })
        outcome = await applier.evict(decision)
        assert isinstance(outcome, PodEvicted) and not outcome.already

        read = await core.read_namespaced_pod("victim", "team-a")
        assert read.metadata.deletion_timestamp is not None, "the pod should still be terminating"
        [target] = [c for c in read.status.conditions if c.type == "DisruptionTarget"]
        assert (target.status, target.reason) == ("True", "PreemptionByScheduler")
        assert target.message == (
            "kai-scheduler: reclaim for team-a/a1 (queue qa): reclaimed for team-a/a1 (queue qa within fair share)"
        )

        on_pod = await core.list_namespaced_event("team-a", field_selector="involvedObject.name=victim")
        on_group = await core.list_namespaced_event(
            "team-a", field_selector="involvedObject.kind=PodGroup,involvedObject.name=train"
        )
        for events, kind in ((on_pod.items, "Pod"), (on_group.items, "PodGroup")):
            assert len(events) == 1, events
            [event] = events
            assert event.involved_object.kind == kind and event.reason == "Reclaimed"
            assert event.message == target.message and event.source.component == "kai-scheduler"
        assert on_pod.items[0].involved_object.uid == victim["metadata"]["uid"]

        again = await applier.evict(decision)
        assert isinstance(again, PodEvicted)
        assert len((await core.list_namespaced_event("team-a")).items) == 2, "re-applying wrote a second Event"


async def test_a_pod_already_gone_gets_no_condition_or_event(slow_sim: SimCluster) -> None:
    assert slow_sim.url is not None
    async with api_client(slow_sim.url) as api:
        applier = KubeApplier(api, RetryPolicy(attempts=3, base_delay_s=0.01))
        gone = await slow_sim.create(pod("gone"))
        await client.CoreV1Api(api).delete_namespaced_pod("gone", "team-a")
        outcome = await applier.evict(evict(gone))
        assert isinstance(outcome, PodEvicted) and outcome.already
        assert (await client.CoreV1Api(api).list_namespaced_event("team-a")).items == []
