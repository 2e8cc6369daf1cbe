"""List and watch one kind over the Kubernetes REST API: resourceVersions, bookmarks and 410 Expired.

``list_objects`` returns the items and the list's resourceVersion; ``watch_objects`` streams
``(type, object)`` from a resourceVersion, swallowing nothing: a BOOKMARK is yielded (its object carries
only the new resourceVersion) and a 410 — as an HTTP status or as an ERROR event — raises ``Expired`` so
the caller re-lists.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from kubernetes_asyncio.client.exceptions import ApiException

from connectors.kubernetes.kinds import ListCall, WatchedKind

Obj = dict[str, Any]


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
