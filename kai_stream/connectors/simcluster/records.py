"""Server-side measurements for tests and benchmarks: when each pod was created, and every binding and
eviction POST with its outcome and timestamps (monotonic `time.perf_counter()` seconds, plus wall time)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kai_stream.connectors.simcluster.store import ADDED, Change, Obj


@dataclass(frozen=True)
class BindingRecord:
    namespace: str
    name: str
    node: str
    code: int
    at: float
    created_at: float | None
    wall: float

    @property
    def latency(self) -> float | None:
        """Seconds from the pod's creation in this server to this binding POST."""
        return None if self.created_at is None else self.at - self.created_at


@dataclass(frozen=True)
class EvictionRecord:
    namespace: str
    name: str
    code: int
    at: float


@dataclass
class Recorder:
    pod_created_at: dict[tuple[str, str], float] = field(default_factory=dict)
    bindings: list[BindingRecord] = field(default_factory=list)
    evictions: list[EvictionRecord] = field(default_factory=list)

    def on_change(self, change: Change, obj: Obj, old: Obj | None) -> None:
        if change.type == ADDED and change.resource.key == "pods":
            meta = obj["metadata"]
            self.pod_created_at[(meta["namespace"], meta["name"])] = time.perf_counter()

    def binding(self, namespace: str, name: str, node: str, code: int) -> None:
        created = self.pod_created_at.get((namespace, name))
        self.bindings.append(BindingRecord(namespace, name, node, code, time.perf_counter(), created, time.time()))

    def eviction(self, namespace: str, name: str, code: int) -> None:
        self.evictions.append(EvictionRecord(namespace, name, code, time.perf_counter()))

    @property
    def binding_count(self) -> int:
        return len(self.bindings)

    def report(self) -> dict[str, Any]:
        """JSON-ready copy for `GET /debug/simcluster/bindings` (benchmarks that run the cluster elsewhere)."""
        return {
            "count": len(self.bindings),
            "bindings": [
                {"namespace": b.namespace, "name": b.name, "node": b.node, "code": b.code, "wall": b.wall,
                 "latency_s": b.latency}
                for b in self.bindings
            ],
            "evictions": [{"namespace": e.namespace, "name": e.name, "code": e.code} for e in self.evictions],
        }
