"""The GPU agent loop: poll NVML, publish ``GpuHealthObserved`` for this node when its GPUs' health changes
(or every ``resync_s``), react at once to a fatal XID, and keep the Prometheus GPU gauges current.

Publishing goes through a ``Sink`` (an async callable), so the same loop prints JSON (``--print``) or sends to
the cluster-events topic keyed by node pool (``kafka_sink``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from kai_stream.connectors.nvml.reading import GpuReader
from kai_stream.core.events import GpuDevice, GpuHealthObserved, stable_id
from kai_stream.kafka import publish
from kai_stream.observability import (
    EVENTS_PUBLISHED,
    GPU_HEALTHY,
    GPU_MEMORY_USED,
    GPU_READINGS,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
    Health,
)

Sink = Callable[[GpuHealthObserved], Awaitable[None]]


@dataclass(frozen=True)
class AgentConfig:
    node: str
    pool: str = "default"
    interval_s: float = 10.0
    resync_s: float = 300.0
    topic: str = "cluster-events"


def build_event(node: str, pool: str, ts: float, gpus: tuple[GpuDevice, ...]) -> GpuHealthObserved:
    return GpuHealthObserved(
        event_id=stable_id("GpuHealthObserved", node, repr(ts)),
        ts=ts,
        pool=pool,
        node=node,
        gpus=gpus,
        utilization_pct=tuple(gpu.utilization_pct or 0.0 for gpu in gpus),
    )


def _signature(gpus: tuple[GpuDevice, ...]) -> tuple[tuple[int, str, int, bool, str], ...]:
    """What the scheduler cares about; utilization and temperature changes alone do not republish."""
    return tuple((gpu.index, gpu.uuid, gpu.memory_mib, gpu.healthy, gpu.reason) for gpu in gpus)


def kafka_sink(producer: AIOKafkaProducer, topic: str) -> Sink:
    async def send(event: GpuHealthObserved) -> None:
        await publish(producer, topic, event, pool=event.pool)
        EVENTS_PUBLISHED.labels(component="gpu-agent", topic=topic, type=event.type).inc()

    return send


class GpuAgent:
    """Runs the poll/publish loop for one node; ``reader`` must be opened by the caller."""

    def __init__(
        self,
        reader: GpuReader,
        config: AgentConfig,
        sink: Sink,
        *,
        clock: Callable[[], float] = time.time,
        health: Health | None = None,
    ) -> None:
        self.reader = reader
        self.config = config
        self.sink = sink
        self.clock = clock
        self.health = health
        self._last_signature: tuple[tuple[int, str, int, bool, str], ...] | None = None
        self._last_sent = float("-inf")

    async def poll_once(self) -> GpuHealthObserved | None:
        """Read every GPU; publish when health changed or the resync interval passed; return what was sent."""
        gpus = self.reader.read()
        self._observe(gpus)
        now = self.clock()
        signature = _signature(gpus)
        if signature == self._last_signature and now - self._last_sent < self.config.resync_s:
            return None
        event = build_event(self.config.node, self.config.pool, now, gpus)
        await self.sink(event)
        self._last_signature = signature
        self._last_sent = now
        return event

    def _observe(self, gpus: tuple[GpuDevice, ...]) -> None:
        node = self.config.node
        for gpu in gpus:
            result = "ok" if not gpu.reason.startswith("NVML ") else gpu.reason.split(";")[0].removeprefix("NVML ")
            GPU_READINGS.labels(node=node, result=result).inc()
            index = str(gpu.index)
            GPU_HEALTHY.labels(node=node, gpu=index, uuid=gpu.uuid).set(1.0 if gpu.healthy else 0.0)
            if gpu.temperature_c is not None:
                GPU_TEMPERATURE.labels(node=node, gpu=index).set(gpu.temperature_c)
            GPU_MEMORY_USED.labels(node=node, gpu=index).set(gpu.memory_used_mib * 1024 * 1024)
            if gpu.utilization_pct is not None:
                GPU_UTILIZATION.labels(node=node, gpu=index).set(gpu.utilization_pct / 100.0)
        if self.health is not None:
            self.health.beat()

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set; a fatal XID cuts the wait short so the scheduler hears of it at once."""
        while not stop.is_set():
            try:
                await self.poll_once()
            except Exception as exc:  # the sink failing (Kafka away) must not end the agent: retried next poll
                print(f"gpu-agent: publishing failed, retrying next poll: {exc!r}", file=sys.stderr)
                if self.health is not None:
                    self.health.set_condition("publish", False, repr(exc))
            else:
                if self.health is not None:
                    self.health.set_condition("publish", True)
            deadline = time.monotonic() + self.config.interval_s
            while not stop.is_set():
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    break
                if not self.reader.xid_supported:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=left_ms / 1000)
                    break
                events = await asyncio.to_thread(self.reader.wait_xids, min(left_ms, 1000))
                if any(event.xid in self.reader.fatal_xids for event in events):
                    break
