"""Calls to the kubernetes_asyncio client that its annotations do not describe: dict bodies (the client sends them
as they are), ``_content_type`` on patches and the raw response of ``_preload_content=False``; and the Status
object an API error carries."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException


async def send(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``await method(*args, **kwargs)`` with the client's parameter and return annotations left out."""
    untyped: Any = method
    return await untyped(*args, **kwargs)


def status_of(error: ApiException) -> Any:
    """The decoded body (a ``Status``) of an API error."""
    assert error.body is not None
    return json.loads(error.body)
