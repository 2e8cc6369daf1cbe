"""List and watch one kind over the Kubernetes REST API: resourceVersions, bookmarks and 410 Expired.

``list_objects`` returns the items and the list's resourceVersion; ``watch_objects`` streams
``(type, object)`` from a resourceVersion, swallowing nothing: a BOOKMARK is yielded (its object carries
only the new resourceVersion) and a 410 — as an HTTP status or as an ERROR event — raises ``Expired`` so
the caller re-lists. ``follow`` is the one list-then-watch loop the connector and the binder's view run: it
owns when to re-list and how long to back off.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client.exceptions import ApiException

from kai_stream.connectors.kubernetes.kinds import ListCall, WatchedKind

Obj = dict[str, Any]

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0


class Expired(Exception):
    """The resourceVersion is too old for a watch (410 Gone): list again."""


class WatchError(RuntimeError):
    """The API sent an ERROR event other than 410."""


def _complete(kind: WatchedKind, obj: Obj) -> Obj:
    obj.setdefault("kind", kind.kind)
    obj.setdefault("apiVersion", kind.api_version)
    return obj


async def list_objects(kind: WatchedKind, call: ListCall) -> tuple[list[Obj], str]:
    """Every object of ``kind`` and the resourceVersion to watch from."""
    resp = await call(_preload_content=False)
    try:
        data = orjson.loads(await resp.read())
    finally:
        resp.release()
    items = [_complete(kind, item) for item in data.get("items") or []]
    return items, str((data.get("metadata") or {}).get("resourceVersion", ""))


def resource_version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


async def watch_objects(
    kind: WatchedKind, call: ListCall, since: str, *, timeout_s: int
) -> AsyncIterator[tuple[str, Obj]]:
    """Changes of ``kind`` after resourceVersion ``since`` until the server closes the watch."""
    try:
        resp = await call(
            watch=True,
            resource_version=since,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_s,
            _preload_content=False,
        )
    except ApiException as exc:
        if exc.status == 410:
            raise Expired(f"{kind.kind} watch from {since}: 410 Gone") from exc
        raise
    try:
        while True:
            line = await resp.content.readline()
            if not line:
                return
            if not line.strip():
                continue
            event = orjson.loads(line)
            kind_of_change = str(event.get("type", ""))
            obj = event.get("object") or {}
            if kind_of_change == "ERROR":
                if obj.get("code") == 410:
                    raise Expired(f"{kind.kind} watch from {since}: {obj.get('message', '410 Gone')}")
                raise WatchError(f"{kind.kind} watch error: {obj.get('message', obj)}")
            yield kind_of_change, _complete(kind, obj)
    finally:
        resp.release()


async def follow(
    kind: WatchedKind,
    call: ListCall,
    *,
    relist: Callable[[], Awaitable[str]],
    changed: Callable[[str, Obj, str], Awaitable[None]],
    timeout_s: int,
    who: str,
    unserved: Callable[[ApiException], bool] | None = None,
) -> None:
    """List ``kind``, then watch it from the list's resourceVersion, until cancelled.

    ``relist()`` lists (and applies what it listed) and returns the version to watch from; ``changed(type,
    object, version)`` is awaited for every change but bookmarks, with the newest resourceVersion seen. A 410 or
    an ERROR event re-lists at once; a failed call or a broken stream waits ``BACKOFF_FIRST_S``, doubling up to
    ``BACKOFF_MAX_S`` until a watch ends cleanly, and resumes from the last version seen. When ``unserved`` says
    of an ``ApiException`` that the API will never serve the kind to this account, ``follow`` returns.
    """
    version: str | None = None
    backoff = BACKOFF_FIRST_S
    while True:
        try:
            if version is None:
                version = await relist()
            async for change, obj in watch_objects(kind, call, version, timeout_s=timeout_s):
                version = resource_version(obj) or version
                if change != "BOOKMARK":
                    await changed(change, obj, version)
            backoff = BACKOFF_FIRST_S
        except (Expired, WatchError) as exc:
            log.info("%s: %s; re-listing", who, exc)
            version = None
        except (ApiException, aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            if isinstance(exc, ApiException) and unserved is not None and unserved(exc):
                return
            log.warning("%s: %s watch broke (%r); retrying in %.1fs", who, kind.kind, exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
