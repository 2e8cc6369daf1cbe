"""Write in-memory pool logs as a Parquet history (the layout the sink writes), e.g. for simulated runs."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kai_stream.history.reader import CLUSTER_EVENTS_TOPIC, DECISIONS_TOPIC, PoolLog
from kai_stream.history.schema import event_row, write_segment

__all__ = ["write_history"]


def _segments(rows: list[dict[str, Any]], directory: Path, segment_records: int) -> int:
    written = 0
    for start in range(0, len(rows), segment_records):
        chunk = rows[start : start + segment_records]
        write_segment(chunk, directory, f"{chunk[0]['offset']:020d}-{chunk[-1]['offset']:020d}")
        written += 1
    return written


def write_history(directory: str | Path, logs: Iterable[PoolLog], *, segment_records: int = 100_000) -> int:
    """Write each pool's events and decisions-topic records (partition = the pool's position); segment count.

    Decisions-topic records (configs first, then decisions) get fresh offsets in that order.
    """
    root = Path(directory)
    segments = 0
    for partition, log in enumerate(sorted(logs, key=lambda lg: lg.pool)):
        events = [
            event_row(CLUSTER_EVENTS_TOPIC, partition, offset, event)
            for offset, event in zip(log.offsets, log.events, strict=True)
        ]
        records = [*log.configs, *log.fair_shares, *log.decisions]
        decisions = [event_row(DECISIONS_TOPIC, partition, i, record) for i, record in enumerate(records)]
        segments += _segments(events, root / CLUSTER_EVENTS_TOPIC / str(partition), segment_records)
        segments += _segments(decisions, root / DECISIONS_TOPIC / str(partition), segment_records)
    return segments
