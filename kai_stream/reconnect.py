"""Keep a component running through the loss of its broker or API server: on a connection error its run is
started again after an exponential back-off (``tenacity``), instead of the process exiting and waiting for an
outside restart. Readiness says what is being waited for meanwhile; any other error still ends the run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import aiohttp
from aiokafka.errors import KafkaError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from kai_stream.observability import Health

log = logging.getLogger(__name__)

RECOVERABLE: tuple[type[BaseException], ...] = (KafkaError, OSError, asyncio.TimeoutError, aiohttp.ClientError)
"""Errors of a lost connection (broker, API server): worth starting the run again."""


async def keep_running(
    component: str,
    run: Callable[[], Awaitable[None]],
    health: Health | None = None,
    *,
    initial_s: float = 0.25,
    max_s: float = 5.0,
) -> None:
    """Await ``run()`` until it returns, starting it again after each ``RECOVERABLE`` error (waits of
    ``initial_s`` doubling up to ``max_s``); the ``connection`` readiness condition is false while waiting."""

    def waiting(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning("%s: connection lost (%r); starting again in %.2fs (attempt %d)",
                    component, exc, delay, state.attempt_number)
        if health is not None:
            health.set_condition("connection", False, f"reconnecting after {type(exc).__name__}: {exc}")

    retrying = AsyncRetrying(
        wait=wait_exponential(multiplier=initial_s, max=max_s),
        retry=retry_if_exception_type(RECOVERABLE),
        before_sleep=waiting,
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            if health is not None:
                health.set_condition("connection", True)
            await run()
