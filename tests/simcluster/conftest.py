"""Fixtures: a running SimCluster on a free loopback port and kubernetes-asyncio clients pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from connectors.simcluster import SimCluster, api_client


@pytest.fixture
def sim_options() -> dict[str, Any]:
    return {}


@pytest.fixture
async def sim(sim_options: dict[str, Any]) -> AsyncIterator[SimCluster]:
    options = {"time_scale": 0.01, "bookmark_interval": 0.2, **sim_options}
    cluster = SimCluster(**options)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


@pytest.fixture
async def api(sim: SimCluster) -> AsyncIterator[client.ApiClient]:
    assert sim.url is not None
    async with api_client(sim.url) as api:
        yield api


@pytest.fixture
def v1(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def crd(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)
