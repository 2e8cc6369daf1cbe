"""Binder test fixtures: a simulated cluster over HTTP, its client configuration, and decision builders."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from connectors.simcluster import SimCluster, api_client, kube_client_config


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
