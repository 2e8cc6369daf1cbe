"""One watch request as an NDJSON stream: drain the watcher's inbox in batches, write BOOKMARKs when the
client allows them, end at `timeoutSeconds`, and report a too-old resourceVersion as an ERROR event
carrying a 410 Expired `Status` (as the apiserver does), which tells the client to re-list."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson
from aiohttp import web

from kai_stream.connectors.simcluster.errors import ApiError
from kai_stream.connectors.simcluster.resources import ResourceType
from kai_stream.connectors.simcluster.selectors import Selector
from kai_stream.connectors.simcluster.store import BOOKMARK, ERROR, Store

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class WatchParams:
    since: int | None
    timeout: float
    bookmarks: bool
    initial_events_end: bool


def _bookmark(rt: ResourceType, rv: int, *, initial_end: bool = False) -> bytes:
    meta: dict[str, object] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return orjson.dumps({"type": BOOKMARK, "object": {"kind": rt.kind, "apiVersion": rt.api_version,
                                                      "metadata": meta}}) + b"\n"


async def stream(
    request: web.Request,
    store: Store,
    rt: ResourceType,
    namespace: str | None,
    selector: Selector,
    params: WatchParams,
    *,
    bookmark_interval: float,
    closing: asyncio.Event,
) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        watcher = store.watch(rt, namespace, selector, params.since)
    except ApiError as err:
        await response.write(orjson.dumps({"type": ERROR, "object": err.status()}) + b"\n")
        await response.write_eof()
        return response
    loop = asyncio.get_running_loop()
    deadline = loop.time() + params.timeout
    next_bookmark = loop.time() + bookmark_interval
    initial_end_due = params.initial_events_end and params.bookmarks
    try:
        while not closing.is_set():
            now = loop.time()
            if now >= deadline:
                break
            transport = request.transport
            if transport is None or transport.is_closing():
                return response
            if not watcher.pending:
                wake = min(deadline, next_bookmark) if params.bookmarks else deadline
                try:
                    async with asyncio.timeout(min(max(0.0, wake - now), 5.0)):
                        await watcher.ready.wait()
                except TimeoutError:
                    pass
            changes = watcher.drain()
            chunk = b"".join(line for c in changes if (line := watcher.render(c)) is not None)
            if chunk:
                await response.write(chunk)
            if watcher.pending:
                continue
            if initial_end_due:
                initial_end_due = False
                await response.write(_bookmark(rt, store.resource_version, initial_end=True))
            elif params.bookmarks and loop.time() >= next_bookmark:
                await response.write(_bookmark(rt, store.resource_version))
                next_bookmark = loop.time() + bookmark_interval
        if params.bookmarks and not watcher.pending and not closing.is_set():
            await response.write(_bookmark(rt, store.resource_version))
        await response.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        store.unwatch(watcher)
    return response
