"""Contiguous fetches: a consumer never moves past an offset whose record it has not been given.

On the embedded Tansu broker, while two producers write to one partition (the connector and the binder both
write cluster-events), a fetch can answer with a batch at offset N+1 while the batch at offset N, already given
its offset, is not stored yet. The consumer takes the records it got, its position moves past N, and it never
asks for N again: a pod's creation skipped that way is never scheduled (what was seen: benchmarks/README.md).
Real Kafka only hands out offsets it has stored (up to the high-watermark), so there a hole means compaction
or nothing at all; kai-stream's topics are not compacted.

``FetchGapGuard`` looks at the record-batch headers of each fetch answer (no decoding of records) and cuts a
partition's records at the first hole: before the first batch when that starts past the fetch offset, or before
a batch that starts past the end of the one before it. What is before the hole is delivered; the consumer's next
fetch starts at the hole and gets the missing batch once it is stored. A hole still there after
``patience_s`` (a compacted topic on a real cluster) is let through with a warning, so a consumer never stalls
for good. Only message format v2 batches (Kafka >= 0.11, Tansu) are checked; anything else passes unchanged.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.protocol.fetch import FetchRequest

from kai_stream.internals import kafka_client

log = logging.getLogger(__name__)

DEFAULT_PATIENCE_S = 30.0

_HEADER = struct.Struct(">qi")  # baseOffset, batchLength
_MAGIC_AT = 16
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23
_V2_HEADER_SIZE = 61


def _batches(records: bytes) -> Iterator[tuple[int, int, int]]:
    """(position, base offset, last offset) of each record-batch header of a fetch answer's ``records``, in order;
    a batch that is not format v2 yields (position, -1, -1) and ends the walk."""
    position = 0
    size = len(records)
    while position + _V2_HEADER_SIZE <= size:
        base, length = _HEADER.unpack_from(records, position)
        if records[position + _MAGIC_AT] != 2:
            yield position, -1, -1
            return
        yield position, base, base + _LAST_DELTA.unpack_from(records, position + _LAST_DELTA_AT)[0]
        position += 12 + length


def contiguous_prefix(records: bytes, fetch_offset: int) -> tuple[int, int | None]:
    """How many leading bytes of a fetch answer's ``records`` hold no hole, and the offset of the hole (None when
    there is none, or when the batches are not format v2 and so not checked)."""
    expected = fetch_offset
    for position, base, last in _batches(records):
        if base < 0:
            break
        if base > expected:
            return position, expected
        expected = max(expected, last + 1)
    return len(records), None


def records_end(records: bytes) -> int | None:
    """The offset after the last batch of a fetch answer's ``records`` (from the batch headers), or None when they
    hold no format v2 batch header."""
    end = None
    for _, base, last in _batches(records):
        if base < 0:
            return None
        end = last + 1
    return end


class FetchGapGuard:
    """Cuts every fetch answer of one consumer at its first hole (see module docstring)."""

    def __init__(self, patience_s: float = DEFAULT_PATIENCE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.patience_s = patience_s
        self.clock = clock
        self.holes = 0
        """Answers cut at a hole."""
        self._first_seen: dict[tuple[str, int], tuple[int, float]] = {}

    def attach(self, consumer: AIOKafkaConsumer) -> AIOKafkaConsumer:
        """Guard ``consumer``'s fetch answers from now on (before or after it is started)."""
        client = kafka_client(consumer)
        send: Callable[..., Awaitable[Any]] = client.send

        async def guarded_send(node_id: int, request: Any, **kwargs: Any) -> Any:
            response = await send(node_id, request, **kwargs)
            if isinstance(request, FetchRequest):
                self.cut(request, response)
            return response

        client.send = guarded_send
        return consumer

    def cut(self, request: Any, response: Any) -> None:
        """Replace, in ``response``, each partition's records by their part before the first hole."""
        offsets = {(topic, p[0]): p[1] for topic, partitions in request.topics for p in partitions}
        changed = False
        topics = []
        for topic, partitions in response.topics:
            kept = []
            for partition_data in partitions:
                partition, error_code, _highwater, *part_data = partition_data
                offset = offsets.get((topic, partition))
                records = part_data[-1] if part_data else None
                if error_code == 0 and offset is not None and records:
                    data = records if isinstance(records, bytes) else bytes(records)
                    usable = self._usable(topic, partition, offset, data)
                    if usable < len(data):
                        partition_data = (*partition_data[:-1], data[:usable])
                        changed = True
                kept.append(partition_data)
            topics.append((topic, kept))
        if changed:
            response.topics = topics

    def _usable(self, topic: str, partition: int, offset: int, records: bytes) -> int:
        usable, hole = contiguous_prefix(records, offset)
        key = (topic, partition)
        if hole is None:
            self._first_seen.pop(key, None)
            return usable
        now = self.clock()
        seen = self._first_seen.get(key)
        if seen is None or seen[0] != hole:
            seen = (hole, now)
            self._first_seen[key] = seen
        if now - seen[1] >= self.patience_s:
            log.warning("fetch: %s[%d] has had no record at offset %d for %.1fs; going on past it",
                        topic, partition, hole, now - seen[1])
            self._first_seen.pop(key, None)
            return len(records)
        self.holes += 1
        log.debug("fetch: %s[%d] answer holds records past a hole at %d; cut there", topic, partition, hole)
        return usable


def gap_guarded(consumer: AIOKafkaConsumer, patience_s: float = DEFAULT_PATIENCE_S) -> AIOKafkaConsumer:
    """``consumer`` with a ``FetchGapGuard`` attached."""
    FetchGapGuard(patience_s).attach(consumer)
    return consumer
