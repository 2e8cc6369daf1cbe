"""What the rebuild tests feed a runtime: a consumed record as aiokafka hands it over, and a pool's Tick."""

from __future__ import annotations

from dataclasses import dataclass

from kai_stream.core.events import Tick, stable_id


@dataclass
class FakeRecord:
    offset: int
    value: bytes
    key: bytes | None = b"default"
    timestamp: int = 0


def tick(ts: float, pool: str = "default") -> Tick:
    return Tick(event_id=stable_id("tick", repr(ts)), ts=ts, pool=pool)
