"""Binder test fixtures: a simulated cluster over HTTP, its client configuration, and decision builders."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
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


@pytest.fixture
async def flaky(sim: SimCluster) -> AsyncIterator[dict[str, Any]]:
    """A real HTTP proxy in front of the simulated cluster: for paths containing ``path`` it answers ``status``
    to the next ``failures`` calls and delays the others by ``delay_s``."""
    control: dict[str, Any] = {"path": "/binding", "failures": 0, "status": 503, "delay_s": 0.0}
    session = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.Response:
        if control["path"] in request.path and control["failures"] > 0:
            control["failures"] -= 1
            return web.json_response({"kind": "Status", "code": control["status"]}, status=control["status"])
        if control["path"] in request.path and control["delay_s"]:
            await asyncio.sleep(control["delay_s"])
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with session.request(request.method, f"{sim.url}{request.path_qs}", data=body, headers=headers) as r:
            return web.Response(body=await r.read(), status=r.status, content_type=r.content_type)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    control["url"] = f"http://{host}:{port}"
    try:
        yield control
    finally:
        await runner.cleanup()
        await session.close()
