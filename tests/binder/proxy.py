"""An HTTP proxy for fault injection between the binder and the simulated cluster."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web


class Proxy:
    """A real HTTP proxy in front of the simulated cluster. For paths containing ``path`` it answers
    ``status`` to the next ``failures`` calls and delays the others by ``delay_s``; ``forwarded`` lists the
    (method, path, code) of every call it passed on. A watch is streamed through as the cluster writes it."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.path = "/binding"
        self.failures = 0
        self.status = 503
        self.delay_s = 0.0
        self.forwarded: list[tuple[str, str, int]] = []
        self.url = ""
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> Proxy:
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        matches = self.path in request.path
        if matches and self.failures > 0:
            self.failures -= 1
            return web.json_response({"kind": "Status", "code": self.status}, status=self.status)
        if matches and self.delay_s:
            await asyncio.sleep(self.delay_s)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        url = f"{self.target}{request.path_qs}"
        async with self._session.request(request.method, url, data=body, headers=headers) as response:
            self.forwarded.append((request.method, request.path, response.status))
            if request.query.get("watch", "").lower() not in ("true", "1"):
                return web.Response(
                    body=await response.read(), status=response.status, content_type=response.content_type
                )
            streamed = web.StreamResponse(status=response.status, headers={"Content-Type": response.content_type})
            await streamed.prepare(request)
            async for chunk in response.content.iter_any():
                await streamed.write(chunk)
            return streamed
