"""Liveness follows progress (a stuck batch or a crash loop fails it, a timer cannot hide either) and a lost
broker is reconnected to with back-off instead of ending the component."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from aiokafka.errors import KafkaConnectionError

from kai_stream.observability import Health
from kai_stream.reconnect import keep_running


def test_a_stuck_batch_fails_liveness_whatever_the_timer_says() -> None:
    now = [0.0]
    health = Health("processor", stale_after_s=60, clock=lambda: now[0])
    health.beat()
    health.working()
    for _ in range(20):
        now[0] += 5
        health.idle_beat()
    ok, detail = health.alive()
    assert not ok and "stuck" in detail
    health.done()
    now[0] += 5
    health.idle_beat()
    assert health.alive() == (True, "ok")


def test_a_crash_loop_fails_liveness_and_clears_after_the_window() -> None:
    now = [0.0]
    health = Health("processor", stale_after_s=60, clock=lambda: now[0])
    for _ in range(3):
        health.working()
        now[0] += 1
        health.failed("IndexError('boom')")
        health.idle_beat()
    ok, detail = health.alive()
    assert not ok and "crash-looping" in detail and "boom" in detail
    now[0] += 61
    health.idle_beat()
    assert health.alive() == (True, "ok")


async def test_keep_running_reconnects_after_broker_loss() -> None:
    health = Health("binder")
    calls: list[float] = []
    seen: list[bool] = []

    async def run() -> None:
        calls.append(asyncio.get_running_loop().time())
        seen.append(health.ready()[0])
        if len(calls) < 4:
            raise KafkaConnectionError("broker gone")

    await asyncio.wait_for(keep_running("binder", run, health, initial_s=0.01, max_s=0.04), 5)
    assert len(calls) == 4 and all(seen)
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[-1] >= 0.03  # backed off
    assert health.ready() == (True, {"connection": "ok"})


async def test_keep_running_does_not_hide_a_bug() -> None:
    calls = 0

    async def run() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("a bug, not a lost connection")

    with pytest.raises(ValueError):
        await keep_running("connector", run, None, initial_s=0.01)
    assert calls == 1
