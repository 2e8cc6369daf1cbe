"""Binder test fixtures: a simulated cluster over HTTP, its client configuration, and decision builders."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from kubernetes_asyncio import client

from kai_stream.connectors.simcluster import SimCluster, kube_client_config
from tests.simcluster_fixtures import api, sim, sim_options

from .proxy import Proxy

__all__ = ["api", "flaky", "kube_config", "proxies", "sim", "sim_options"]


@pytest.fixture
def kube_config(sim: SimCluster) -> client.Configuration:
    assert sim.url is not None
    return kube_client_config(sim.url)


@pytest.fixture
async def proxies(sim: SimCluster) -> AsyncIterator[Callable[[], Awaitable[Proxy]]]:
    """A factory of proxies to the simulated cluster (all stopped after the test)."""
    started: list[Proxy] = []

    async def make() -> Proxy:
        assert sim.url is not None
        proxy = await Proxy(sim.url).start()
        started.append(proxy)
        return proxy

    try:
        yield make
    finally:
        for proxy in started:
            await proxy.stop()


@pytest.fixture
async def flaky(proxies: Callable[[], Awaitable[Proxy]]) -> Proxy:
    return await proxies()
