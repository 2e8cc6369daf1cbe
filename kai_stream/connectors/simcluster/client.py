"""kubernetes-asyncio client configuration pointed at a simulated cluster (plain HTTP, no auth)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kubernetes_asyncio import client


def kube_client_config(base_url: str) -> client.Configuration:
    config = client.Configuration(host=base_url.rstrip("/"))
    config.verify_ssl = False
    return config


@asynccontextmanager
async def api_client(base_url: str) -> AsyncIterator[client.ApiClient]:
    """`async with api_client(url) as api: CoreV1Api(api) ...`; closes the HTTP session on exit."""
    api = client.ApiClient(configuration=kube_client_config(base_url))
    try:
        yield api
    finally:
        await api.close()
