"""Decision subscriptions: ``async for decision in subscribe(settings, queue="team-a")``.

Every subscriber is its own consumer group on the one decisions topic and filters on the client side, so
teams never need topics of their own. A named group resumes where it last committed; a group without
committed offsets starts at the beginning (``from_beginning``) or at the current end, which is found from
fetch high-watermarks (``end_offsets``/``seek_to_end`` are wrong on the embedded broker). Within one
subscription no decision is yielded twice (``_Delivered``); a named group resumed later may see again what was
delivered after its last commit (at least once).
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer
from aiokafka.abc import ConsumerRebalanceListener

from kai_stream.core.events import (
    DECISIONS_RECORD,
    BindRequested,
    Decision,
    EvictionRequested,
    PodPending,
    PodPipelined,
)
from kai_stream.kafka import READ_TO_END_WAIT_MS, assign_from_start, make_consumer, start_consumer
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames

__all__ = ["DecisionFilter", "Kind", "high_watermarks", "subscribe"]

Kind = Literal["bind", "evict", "pending", "pipeline"]
_KINDS: dict[str, type[Any]] = {
    "bind": BindRequested,
    "evict": EvictionRequested,
    "pending": PodPending,
    "pipeline": PodPipelined,
}


@dataclass(frozen=True)
class DecisionFilter:
    """Which decisions a subscriber wants; an empty field matches everything."""

    queue: str | None = None
    namespace: str | None = None
    kinds: tuple[Kind, ...] = ()
    pool: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.kinds) - set(_KINDS))
        if unknown:
            raise ValueError(f"kind: unknown {unknown}; choose from {sorted(_KINDS)}")

    def matches(self, decision: Decision) -> bool:
        if self.queue is not None and decision.queue != self.queue:
            return False
        if self.namespace is not None and decision.namespace != self.namespace:
            return False
        if self.pool is not None and decision.pool != self.pool:
            return False
        return not self.kinds or any(isinstance(decision, _KINDS[k]) for k in self.kinds)


async def high_watermarks(settings: KafkaSettings, topic: str, *, timeout_s: float = 10.0) -> dict[int, int]:
    """The current end offset of every partition of ``topic``, learned from one fetch per partition."""
    consumer = make_consumer(
        settings, group_id=None, max_partition_fetch_bytes=1024, fetch_max_wait_ms=READ_TO_END_WAIT_MS
    )
    await start_consumer(consumer)
    try:
        tps = await assign_from_start(consumer, topic)
        ends: dict[int, int] = {}
        waited = 0.0
        while len(ends) < len(tps):
            await consumer.getmany(timeout_ms=100, max_records=1)
            waited += 0.1
            for tp in tps:
                high = consumer.highwater(tp)
                if high is not None:
                    ends[tp.partition] = high
            if waited > timeout_s:
                raise TimeoutError(f"no high-watermark for {topic} within {timeout_s}s")
        return ends
    finally:
        await consumer.stop()


class _StartAt(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, from_beginning: bool, ends: dict[int, int]) -> None:
        self.consumer: AIOKafkaConsumer | None = None
        self.from_beginning = from_beginning
        self.ends = ends

    async def on_partitions_revoked(self, revoked: Any) -> None:
        return None

    async def on_partitions_assigned(self, assigned: Any) -> None:
        consumer = self.consumer
        if consumer is None:
            return
        for tp in sorted(assigned):
            if await consumer.committed(tp) is not None:
                continue
            if self.from_beginning:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, self.ends.get(tp.partition, 0))


async def subscribe(
    settings: KafkaSettings,
    *,
    queue: str | None = None,
    namespace: str | None = None,
    kind: Kind | Sequence[Kind] | None = None,
    pool: str | None = None,
    from_beginning: bool = False,
    group_id: str | None = None,
    names: TopicNames | None = None,
    poll_ms: int = 200,
) -> AsyncGenerator[Decision, None]:
    """Yield decisions that match the filter, forever; offsets are committed after each delivered batch."""
    kinds: tuple[Kind, ...] = () if kind is None else (kind,) if isinstance(kind, str) else tuple(kind)
    wanted = DecisionFilter(queue=queue, namespace=namespace, kinds=kinds, pool=pool)
    topic = (names or TopicNames()).decisions
    ends = {} if from_beginning else await high_watermarks(settings, topic)
    listener = _StartAt(from_beginning, ends)
    group = group_id or f"kai-stream-subscriber-{uuid.uuid4().hex[:12]}"
    consumer = make_consumer(settings, topic, group_id=group, listener=listener)
    listener.consumer = consumer
    await start_consumer(consumer)
    delivered = _Delivered()
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=poll_ms)
            for tp in sorted(batches):
                for record in batches[tp]:
                    if not delivered.first_time(tp.partition, record.offset):
                        continue
                    try:
                        decoded = DECISIONS_RECORD.validate_json(record.value or b"")
                    except ValueError:
                        continue
                    if isinstance(decoded, BindRequested | EvictionRequested | PodPending | PodPipelined) and (
                        wanted.matches(decoded) and delivered.new_decision(decoded.decision_id)
                    ):
                        yield decoded
            if batches:
                await consumer.commit({tp: records[-1].offset + 1 for tp, records in batches.items()})
    finally:
        await consumer.stop()


class _Delivered:
    """What one subscription has already yielded, so that nothing reaches its caller twice: records at offsets it
    has passed (a rebalance before a commit seeks back to the last committed offset, or to the beginning) and
    decision ids among the last ``window`` it yielded (a restarted processor on a broker without transactions
    publishes its uncommitted decisions again, at new offsets, under the same ids)."""

    def __init__(self, window: int = 65_536) -> None:
        self._next_offset: dict[int, int] = {}
        self._ids: set[str] = set()
        self._order: deque[str] = deque()
        self._window = window

    def first_time(self, partition: int, offset: int) -> bool:
        if offset < self._next_offset.get(partition, 0):
            return False
        self._next_offset[partition] = offset + 1
        return True

    def new_decision(self, decision_id: str) -> bool:
        if decision_id in self._ids:
            return False
        self._ids.add(decision_id)
        self._order.append(decision_id)
        if len(self._order) > self._window:
            self._ids.discard(self._order.popleft())
        return True
