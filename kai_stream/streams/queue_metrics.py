"""Per-queue Prometheus figures of the processor's cycles, read from what a cycle already holds.

A side effect outside the pure core: ``QueueMeter.session`` is given (as ``run_cycle``'s ``inspect``) the closed
session of a cycle and sets each queue's fair share and allocation gauges from it; ``QueueMeter.decisions``
counts the cycle's ``EvictionRequested`` decisions against the preemptor's queue (``preemptor_queue``) and the
victim's (the decision's ``queue``). Neither changes a decision.
"""

from __future__ import annotations

from collections.abc import Iterable

from kai_stream.core.events import EvictionRequested, Model
from kai_stream.core.scheduler.framework.session import Session
from kai_stream.observability import record_eviction, record_queue


class QueueMeter:
    """Sets the queue metrics of one pool."""

    def __init__(self, pool: str) -> None:
        self.pool = pool

    def session(self, session: Session) -> None:
        for name, queue in sorted(session.queues.items()):
            record_queue(self.pool, name, queue.fair_share, queue.allocated)

    def decisions(self, records: Iterable[Model]) -> None:
        for record in records:
            if isinstance(record, EvictionRequested):
                record_eviction(self.pool, record.action, record.preemptor_queue, record.queue)
