"""Per-batch hop times of the processor and the binder, for the pipeline benchmark's latency split.

When ``KAI_STREAM_HOP_TRACE_DIR`` names a directory, a component appends one JSON line per consumed batch to
``<dir>/<component>-<pid>.jsonl``: the partition, the batch's first and last offset, and the wall-clock seconds
(``time.time()``, the clock producers stamp records with) at which it passed each of its points (the processor:
``fetched`` off the consumer, ``taken`` by the batch loop, ``cycled``, ``committed``; the binder: ``fetched``).
``benchmarks/bench_pipeline.py`` joins them with the records' timestamps, so each pod's created→bound time splits
into hops (``split``). Unset (the default), nothing is written.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson
from pydantic_settings import BaseSettings, SettingsConfigDict


class HopTraceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KAI_STREAM_HOP_TRACE_", frozen=True, extra="ignore")

    dir: str | None = None


class HopTrace:
    """One component's trace file (None: tracing off)."""

    def __init__(self, component: str, directory: str | None = None) -> None:
        directory = directory if directory is not None else HopTraceSettings().dir
        self._file: IO[bytes] | None = None
        if directory:
            path = Path(directory) / f"{component}-{os.getpid()}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("ab", buffering=0)

    @property
    def enabled(self) -> bool:
        return self._file is not None

    def batch(self, partition: int, first: int, last: int, **times: float) -> None:
        """Append one batch's line (a no-op when tracing is off)."""
        if self._file is not None:
            line = {"partition": partition, "first": first, "last": last, **times}
            self._file.write(orjson.dumps(line) + b"\n")


def read(directory: Path, component: str) -> list[dict[str, float]]:
    """Every line the ``component``'s processes wrote under ``directory``."""
    return [
        orjson.loads(line)
        for path in sorted(directory.glob(f"{component}-*.jsonl"))
        for line in path.read_bytes().splitlines()
        if line
    ]


HOPS = ("connector publish", "processor fetch", "processor queue", "fold + cycle", "transaction commit", "binder fetch",
        "API bind")
"""The hops of ``split``, in the order a pod passes them."""


@dataclass(frozen=True)
class PodPath:
    """Where one pod's records were and when (wall-clock seconds): created at the API, its first observation
    published on cluster-events, its BindRequested on decisions, its binding POST at the API."""

    created: float
    published: float
    observed_at: tuple[int, int]
    decided_at: tuple[int, int]
    bound: float


class _Batches:
    """The lines of one component by partition, found by the offset they cover (the first line that covers it)."""

    def __init__(self, lines: Iterable[dict[str, float]]) -> None:
        self.by_partition: dict[int, list[dict[str, float]]] = {}
        for line in sorted(lines, key=lambda line: (line["partition"], line["first"])):
            self.by_partition.setdefault(int(line["partition"]), []).append(line)
        self.firsts = {p: [line["first"] for line in lines] for p, lines in self.by_partition.items()}

    def find(self, partition: int, offset: int) -> dict[str, float] | None:
        lines = self.by_partition.get(partition, [])
        i = bisect.bisect_right(self.firsts.get(partition, []), offset)
        for line in reversed(lines[:i]):
            if line["first"] <= offset <= line["last"]:
                return line
        return None


def split(
    pods: Iterable[PodPath], processor: Iterable[dict[str, float]], binder: Iterable[dict[str, float]]
) -> dict[str, list[float]]:
    """Per hop of ``HOPS``, the milliseconds each pod spent in it (pods whose batches were not all traced are
    left out)."""
    processed, fetched = _Batches(processor), _Batches(binder)
    hops: dict[str, list[float]] = {hop: [] for hop in HOPS}
    for pod in pods:
        batch, taken = processed.find(*pod.observed_at), fetched.find(*pod.decided_at)
        if batch is None or taken is None:
            continue
        points = (pod.created, pod.published, batch["fetched"], batch["taken"], batch["cycled"],
                  batch["committed"], taken["fetched"], pod.bound)
        for hop, start, end in zip(HOPS, points, points[1:], strict=False):
            hops[hop].append((end - start) * 1000)
    return hops
