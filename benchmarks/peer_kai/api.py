"""A lean client of the fixture's kube-apiserver for the harness: raw JSON over aiohttp with the admin token, so the
harness spends little CPU next to the schedulers it measures (no model classes, no (de)serialisation layers).

``create`` POSTs a manifest and returns when the server answered; ``watch`` follows a collection from a list's
resourceVersion and hands each event to a callback at the moment it arrives (monotonic clock); ``pods`` lists.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from kai_stream.connectors.apiserver import ControlPlane
from kai_stream.connectors.apiserver.controlplane import collection_path

WATCH_RENEW_S = 20
"""A watch is closed by the server after this long and resumed from its last resourceVersion: with Debian's
etcd 3.4 a long watch on this kube-apiserver can stop delivering events (seen: 26 binds never arrived)."""

WatchHandler = Callable[[str, dict[str, Any], float], None]


class ApiError(RuntimeError):
    """The API server refused a request."""


class Api:
    def __init__(self, plane: ControlPlane, connections: int = 32) -> None:
        self.base = plane.url
        context = ssl.create_default_context(cafile=str(plane.ca_file))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=connections),
            headers={"Authorization": f"Bearer {plane.token}", "Accept": "application/json"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )

    async def close(self) -> None:
        await self._session.close()

    async def request(self, method: str, path: str, body: Any = None,
                      content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
        data = None if body is None else orjson.dumps(body)
        async with self._session.request(method, self.base + path, data=data,
                                         headers={"Content-Type": content_type}) as response:
            payload = await response.read()
            return response.status, orjson.loads(payload) if payload else {}

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        code, answer = await self.request("POST", collection_path(obj), obj)
        if code >= 300:
            raise ApiError(f"creating {obj['kind']} {obj['metadata']['name']}: {code} {answer.get('message')}")
        return answer

    async def items(self, path: str) -> tuple[list[dict[str, Any]], str]:
        """A list's items and its resourceVersion."""
        code, answer = await self.request("GET", path)
        if code != 200:
            raise ApiError(f"GET {path}: {code} {answer.get('message')}")
        return list(answer.get("items") or []), str(answer["metadata"]["resourceVersion"])

    async def watch(self, path: str, handler: WatchHandler, resource_version: str = "") -> None:
        """Follow ``path`` until cancelled: a list first (each item handed over as ``ADDED``), then a watch from
        its resourceVersion, resumed from the last one seen when the server closes it (every ``WATCH_RENEW_S``); after
an expired resourceVersion (ERROR) it lists again."""
        if not resource_version:
            listed, resource_version = await self.items(path)
            now = time.monotonic()
            for obj in listed:
                handler("ADDED", obj, now)
        while True:
            url = (f"{self.base}{path}?watch=true&allowWatchBookmarks=true&timeoutSeconds={WATCH_RENEW_S}"
                   f"&resourceVersion={resource_version}")
            async with self._session.get(url) as response:
                if response.status != 200:
                    raise ApiError(f"watch {path}: {response.status} {await response.text()}")
                async for line in response.content:
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        listed, resource_version = await self.items(path)
                        now = time.monotonic()
                        for item in listed:
                            handler("ADDED", item, now)
                        break
                    resource_version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        handler(event["type"], obj, time.monotonic())
            await asyncio.sleep(0)
