"""The binder refuses a bind onto a node that has no room by its own view of the API (terminating pods
included), and reports it as ``BindFailed`` with the reason; a bind that fits goes through."""

from __future__ import annotations

from typing import Any

from kai_stream.binder.kube import KubeApplier, RetryPolicy
from kai_stream.connectors.simcluster import SimCluster, api_client
from kai_stream.core.events import BindFailed, PodBound, PodEvicted

from .builders import bind, evict, node, pod

FAST = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05)


def _gpus(p: dict[str, Any], n: int) -> dict[str, Any]:
    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(n)
    return p


async def test_bind_onto_gpus_a_terminating_pod_holds_is_refused_until_it_is_gone() -> None:
    async with SimCluster(time_scale=0.05, termination_grace=30) as sim:
        assert sim.url is not None
        await sim.create(node("n1", gpus=2))
        victim = await sim.create(_gpus(pod("victim"), 2))
        async with api_client(sim.url) as api:
            applier = KubeApplier(api, FAST)
            assert isinstance(await applier.bind(bind(victim, "n1", gpus=(0, 1))), PodBound)
            assert isinstance(await applier.evict(evict(victim, offset=2)), PodEvicted)
            assert sim.get("pods/team-a/victim")["metadata"].get("deletionTimestamp")

            preemptor = await sim.create(pod("preemptor"))
            refused = await applier.bind(bind(preemptor, "n1", offset=3, gpus=(1,)), check_first=False)
            assert isinstance(refused, BindFailed)
            assert "lacks free GPUs" in refused.error and "team-a/victim (terminating)" in refused.error
            assert not [b for b in sim.bindings if b.name == "preemptor"], "the refused bind was POSTed"

            await sim.wait_until(lambda: sim.find("pods/team-a/victim") is None, timeout=10)
            bound = await applier.bind(bind(preemptor, "n1", offset=4, gpus=(1,)))
            assert isinstance(bound, PodBound)


async def test_bind_onto_a_taken_gpu_index_is_refused(sim: SimCluster) -> None:
    assert sim.url is not None
    await sim.create(node("n1", gpus=2))
    first = await sim.create(pod("first"))
    second = await sim.create(pod("second"))
    async with api_client(sim.url) as api:
        applier = KubeApplier(api, FAST)
        assert isinstance(await applier.bind(bind(first, "n1", gpus=(0,))), PodBound)
        clash = await applier.bind(bind(second, "n1", offset=2, gpus=(0,)))
        assert isinstance(clash, BindFailed) and "GPU 0 is not free" in clash.error
        assert isinstance(await applier.bind(bind(second, "n1", offset=3, gpus=(1,))), PodBound)
