"""A connector run as a task for the length of a test block, once its first lists are synced."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from kai_stream.connectors.kubernetes import KubernetesConnector


@contextlib.asynccontextmanager
async def running(connector: KubernetesConnector, synced_within_s: float = 15.0) -> AsyncIterator[None]:
    task = asyncio.create_task(connector.run())
    await asyncio.wait_for(connector.synced.wait(), synced_within_s)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
