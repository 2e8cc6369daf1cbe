"""Adaptive fetch wait: a consumer's ``fetch_max_wait_ms`` that grows while it starves behind the log end.

On the embedded Tansu broker every fetch that returns data lists all stored batches of the partition first, so
its cost grows with the partition's batch count, and a fetch whose work outlasts its ``max_wait_ms`` is answered
empty. A consumer with the short wait that keeps latency low at the log end (Tansu never answers a fetch before
its wait expires) then refetches the same records forever while the broker burns CPU (the measurements are in
benchmarks/README.md).

``FetchWaitGovernor`` watches a consumer's fetch responses: two answers in a row with no records while the
partition's high-watermark is past the fetch offset double the wait (up to ``max_ms``; one alone may be records
that arrived after the broker looked, which the next fetch gets); an answer with records shrinks it
by a tenth (a consumer that keeps up with a steady stream is never answered empty at the end, and the broker's
work per fetch falls again once it has caught up), and an answer empty at the high-watermark (caught up)
resets it to ``base_ms``. On real Kafka a starved empty answer does not happen and the wait stays at its base.

A consumer behind on a backlog is answered with what Tansu gathered within the wait, so a short wait splits a
backlog into many small answers, and every answer pays the listing of the whole partition again. So two answers
in a row that carry records but end before the high-watermark double the wait too, up to ``behind_max_ms`` (50 ms
by default: an answer is capped by the fetch's byte limit anyway, and Tansu never answers before the wait is
over); the first answer that reaches the high-watermark (caught up) puts a wait grown this way back to
``base_ms``. Latency does not suffer: records behind the end are late already, and a consumer at the end keeps the
short wait.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.protocol.fetch import FetchRequest

from kai_stream.fetchgaps import records_end
from kai_stream.internals import kafka_client, set_fetch_wait

log = logging.getLogger(__name__)

DEFAULT_MAX_MS = 2000
DEFAULT_BEHIND_MAX_MS = 50


class FetchWaitGovernor:
    """Sets ``fetch_max_wait_ms`` of one consumer from what its fetches return."""

    def __init__(self, base_ms: int, max_ms: int = DEFAULT_MAX_MS, behind_max_ms: int = DEFAULT_BEHIND_MAX_MS) -> None:
        if base_ms < 0 or max_ms < base_ms:
            raise ValueError(f"need 0 <= base_ms <= max_ms, got base_ms={base_ms} max_ms={max_ms}")
        self.base_ms = base_ms
        self.max_ms = max_ms
        self.behind_max_ms = max(base_ms, min(behind_max_ms, max_ms))
        self.behind = 0
        """Answers with records that ended before the high-watermark."""
        self._behind_last = False
        self._grown_behind = False
        self.wait_ms = base_ms
        self.starved = 0
        """Fetches answered empty although the partition had records past the fetch offset."""
        self._starved_last = False
        self._consumer: AIOKafkaConsumer | None = None

    def attach(self, consumer: AIOKafkaConsumer) -> AIOKafkaConsumer:
        """Watch ``consumer``'s fetch responses from now on (before or after it is started)."""
        client = kafka_client(consumer)
        send: Callable[..., Awaitable[Any]] = client.send

        async def watched_send(node_id: int, request: Any, **kwargs: Any) -> Any:
            response = await send(node_id, request, **kwargs)
            if isinstance(request, FetchRequest):
                self.observe(request, response)
            return response

        client.send = watched_send
        self._consumer = consumer
        return consumer

    def observe(self, request: Any, response: Any) -> None:
        """Adjust the wait from one fetch: starved (empty, records were there) or caught up (empty at the end)."""
        offsets = {(topic, p[0]): p[1] for topic, partitions in request.topics for p in partitions}
        starved = caught_up = False
        for topic, partitions in response.topics:
            for partition, error_code, highwater, *part_data in partitions:
                offset = offsets.get((topic, partition))
                if error_code != 0 or offset is None:
                    continue
                if part_data and part_data[-1]:
                    self._starved_last = False
                    self._with_records(highwater, part_data[-1])
                    return
                if highwater > offset:
                    starved = True
                else:
                    caught_up = True
        self._behind_last = False
        if starved:
            self.starved += 1
            self._grown_behind = False
            if self._starved_last:
                self._set(min(self.max_ms, max(2 * self.wait_ms, 2 * self.base_ms, 10)))
            self._starved_last = True
        elif caught_up:
            self._starved_last = False
            self._grown_behind = False
            self._set(self.base_ms)

    def _with_records(self, highwater: int, records: Any) -> None:
        end = records_end(records if isinstance(records, bytes) else bytes(records))
        if end is not None and end < highwater:
            self.behind += 1
            if self.wait_ms > self.behind_max_ms:  # grown by starved answers: shrink as any answer with records does
                self._set(max(self.behind_max_ms, self.wait_ms * 9 // 10))
            elif self._behind_last and self.wait_ms < self.behind_max_ms:
                self._grown_behind = True
                self._set(min(self.behind_max_ms, max(2 * self.wait_ms, 2 * self.base_ms, 10)))
            self._behind_last = True
            return
        self._behind_last = False
        if self._grown_behind and end is not None:
            self._grown_behind = False
            self._set(self.base_ms)
            return
        self._set(max(self.base_ms, self.wait_ms * 9 // 10))

    def _set(self, wait_ms: int) -> None:
        if wait_ms == self.wait_ms:
            return
        log.debug("fetch wait %d -> %d ms", self.wait_ms, wait_ms)
        self.wait_ms = wait_ms
        consumer = self._consumer
        if consumer is None:
            return
        set_fetch_wait(consumer, wait_ms)


def governed(consumer: AIOKafkaConsumer, base_ms: int, max_ms: int = DEFAULT_MAX_MS) -> AIOKafkaConsumer:
    """``consumer`` with a ``FetchWaitGovernor`` attached."""
    FetchWaitGovernor(base_ms, max_ms).attach(consumer)
    return consumer
