"""Fixtures of a running ``SimCluster`` on a free loopback port and a kubernetes-asyncio client pointed at it,
for the suites that talk to the simulated cluster over HTTP (their conftests import them). ``sim_options``
(parametrize it) adds ``SimCluster`` options to the fast defaults."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from kai_stream.connectors.simcluster import SimCluster, api_client


@pytest.fixture
def sim_options() -> dict[str, Any]:
    return {}


@pytest.fixture
async def sim(sim_options: dict[str, Any]) -> AsyncIterator[SimCluster]:
    async with SimCluster(**{"time_scale": 0.01, "bookmark_interval": 0.2, **sim_options}) as cluster:
        yield cluster


@pytest.fixture
async def api(sim: SimCluster) -> AsyncIterator[client.ApiClient]:
    assert sim.url is not None
    async with api_client(sim.url) as api:
        yield api
