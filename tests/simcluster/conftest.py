"""Fixtures: a running SimCluster on a free loopback port and kubernetes-asyncio clients pointed at it."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from tests.simcluster_fixtures import api, sim, sim_options

__all__ = ["api", "crd", "sim", "sim_options", "v1"]


@pytest.fixture
def v1(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def crd(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)
