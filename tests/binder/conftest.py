"""Binder test fixtures: a simulated cluster over HTTP, its client configuration, and decision builders."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from kubernetes_asyncio import client

from connectors.simcluster import SimCluster, api_client, kube_client_config

from .proxy import Proxy


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    cluster = SimCluster(time_scale=0.01, bookmark_interval=0.2)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


@pytest.fixture
def kube_config(sim: SimCluster) -> client.Configuration:
    assert sim.url is not None
    return kube_client_config(sim.url)


@pytest.fixture
async def api(sim: SimCluster) -> AsyncIterator[client.ApiClient]:
    assert sim.url is not None
    async with api_client(sim.url) as api:
        yield api


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
