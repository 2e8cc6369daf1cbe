"""The binder's watched room view: binds are checked against the watched nodes and pods without an API read per
bind, two binds in flight onto one GPU cannot both pass (the first reserves it), a refused or failed POST frees
its reservation, and a terminating pod holds its GPUs until the watch shows it gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from kai_stream.binder.kube import KubeApplier, RetryPolicy
from kai_stream.binder.view import RoomView
from kai_stream.connectors.simcluster import SimCluster, api_client
from kai_stream.core.events import BindFailed, PodBound, PodEvicted

from .builders import bind, evict, node, pod
from .proxy import Proxy

FAST = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05)


def _gpus(p: dict[str, Any], n: int) -> dict[str, Any]:
    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(n)
    return p


@pytest.fixture
async def viewed(sim: SimCluster, proxies: Callable[[], Awaitable[Proxy]]) -> AsyncIterator[
        tuple[KubeApplier, RoomView, Proxy]]:
    proxy = await proxies()
    async with api_client(proxy.url) as api:
        view = RoomView(api)
        watching = asyncio.create_task(view.run())
        try:
            yield KubeApplier(api, FAST, view), view, proxy
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)


def _reads(proxy: Proxy) -> list[str]:
    """Reads of one node (a bind checked by the API reads its node, then lists the pods on it)."""
    return [path for method, path, _ in proxy.forwarded if method == "GET" and path.startswith("/api/v1/nodes/")]


async def _until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_binds_are_checked_by_the_watched_view_without_reads(
        sim: SimCluster, viewed: tuple[KubeApplier, RoomView, Proxy]) -> None:
    applier, view, proxy = viewed
    await sim.create(node("n1", gpus=2))
    first, second = await sim.create(pod("first")), await sim.create(pod("second"))
    await _until(lambda: "n1" in view.nodes)
    assert isinstance(await applier.bind(bind(first, "n1", gpus=(0,)), check_first=False), PodBound)
    clash = await applier.bind(bind(second, "n1", offset=2, gpus=(0,)), check_first=False)
    assert isinstance(clash, BindFailed) and "GPU 0 is not free" in clash.error
    assert not [b for b in sim.bindings if b.name == "second"], "the refused bind was POSTed"
    assert _reads(proxy) == [], "a bind read its node from the API"
    await _until(lambda: "first" in {p.name for p in view.on_node.get("n1", {}).values()})
    assert view.reserved == {}, "the watch showed the bound pod: its reservation ends"


async def test_two_binds_in_flight_onto_one_gpu_cannot_both_pass(
        sim: SimCluster, viewed: tuple[KubeApplier, RoomView, Proxy]) -> None:
    applier, view, proxy = viewed
    await sim.create(node("n1", gpus=1))
    a, b = await sim.create(pod("a")), await sim.create(pod("b"))
    await view.ready()
    await _until(lambda: "n1" in view.nodes)
    proxy.delay_s = 0.3  # both binds are in flight before either is seen by the watch
    outcomes = await asyncio.gather(applier.bind(bind(a, "n1", gpus=(0,)), check_first=False),
                                    applier.bind(bind(b, "n1", offset=2, gpus=(0,)), check_first=False))
    assert sorted(type(o).__name__ for o in outcomes) == ["BindFailed", "PodBound"]
    assert len(sim.bindings) == 1


async def test_a_failed_post_frees_its_reservation(
        sim: SimCluster, viewed: tuple[KubeApplier, RoomView, Proxy]) -> None:
    applier, view, proxy = viewed
    await sim.create(node("n1", gpus=1))
    a, b = await sim.create(pod("a")), await sim.create(pod("b"))
    await _until(lambda: "n1" in view.nodes)
    proxy.failures, proxy.status = 1, 400
    failed = await applier.bind(bind(a, "n1", gpus=(0,)), check_first=False)
    assert isinstance(failed, BindFailed) and "400" in failed.error
    assert view.reserved == {}
    assert isinstance(await applier.bind(bind(b, "n1", offset=2, gpus=(0,)), check_first=False), PodBound)


async def test_a_terminating_pod_holds_its_gpus_until_the_watch_shows_it_gone() -> None:
    async with SimCluster(time_scale=0.05, termination_grace=30) as sim, api_client(sim.url or "") as api:
        view = RoomView(api)
        watching = asyncio.create_task(view.run())
        try:
            applier = KubeApplier(api, FAST, view)
            await sim.create(node("n1", gpus=2))
            victim = await sim.create(_gpus(pod("victim"), 2))
            await _until(lambda: "n1" in view.nodes)
            assert isinstance(await applier.bind(bind(victim, "n1", gpus=(0, 1)), check_first=False), PodBound)
            assert isinstance(await applier.evict(evict(victim, offset=2)), PodEvicted)
            preemptor = await sim.create(pod("preemptor"))
            refused = await applier.bind(bind(preemptor, "n1", offset=3, gpus=(1,)), check_first=False)
            assert isinstance(refused, BindFailed)
            assert "lacks free GPUs" in refused.error and "team-a/victim (terminating)" in refused.error
            await sim.wait_until(lambda: sim.find("pods/team-a/victim") is None, timeout=10)
            await _until(lambda: not view.on_node.get("n1"))
            assert isinstance(await applier.bind(bind(preemptor, "n1", offset=4, gpus=(1,))), PodBound)
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)




async def test_a_listed_pod_is_parsed_when_its_node_is_checked_and_still_counts(sim: SimCluster) -> None:
    """A restarted binder's view is ready once its list arrived, without parsing every pod of the cluster; the
    pods listed on a node still count when a bind onto it is checked, and a pod the watch removes leaves it."""
    for name in ("n1", "n2", "n3"):
        await sim.create(node(name, gpus=1))
    for name, on in (("h1", "n1"), ("h2", "n2"), ("h3", "n3")):
        await sim.create({**pod(name), "spec": {**pod(name)["spec"], "nodeName": on}})
    async with api_client(sim.url or "") as api:
        view = RoomView(api)
        watching = asyncio.create_task(view.run())
        try:
            applier = KubeApplier(api, FAST, view)
            await view.ready()
            assert set(view.nodes) == {"n1", "n2", "n3"}
            assert view.on_node == {}, "the listed pods were parsed before any bind needed them"
            late = await sim.create(pod("late"))
            refused = await applier.bind(bind(late, "n1", gpus=(0,)), check_first=False)
            assert isinstance(refused, BindFailed) and "team-a/h1" in refused.error, refused
            assert set(view.on_node) == {"n1"}, "only the checked node's pods were parsed"
            await applier.core.delete_namespaced_pod("h2", "team-a")
            await sim.wait_until(lambda: sim.find("pods/team-a/h2") is None, timeout=10)
            await _until(lambda: not view._unparsed.get("n2"))  # the watch's deletion reached the unparsed pod
            assert isinstance(await applier.bind(bind(late, "n2", offset=2, gpus=(0,)), check_first=False), PodBound)
            last = await sim.create(pod("last"))
            refused = await applier.bind(bind(last, "n3", offset=3, gpus=(0,)), check_first=False)
            assert isinstance(refused, BindFailed) and "team-a/h3" in refused.error, refused
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
