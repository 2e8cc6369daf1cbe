"""A processor whose batch outlasts its group session and its transaction timeout recovers on Apache Kafka.

A batch blocks the event loop (``time.sleep``, standing in for a 10,000-pod cycle that holds the CPU) for longer
than the consumer's session timeout, the producer's transaction timeout and the broker's sweep of timed-out
transactions: no heartbeat goes out and the group drops the member; when the stall falls inside the open
transaction, the broker aborts it and fences the producer, the batch fails ("batch failed, rebuilding") and the loop
rebuilds from the log, rejoins and decides again. The stalled pod is bound once, a pod created afterwards is bound
within a bound, and the log keeps every invariant and replays identically. With every transaction stalled, a loop
that kept its transaction timeout was fenced on every try and never bound anything;
it now raises the timeout after the first fence. Run for a dynamic and a static member (``instance_id``, as
``bench_restart`` runs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindRequested,
    ClusterEvent,
    Decision,
    DecisionBase,
    Model,
    NodeObserved,
    NodeSpec,
    PodObserved,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
    dumps,
    loads_decisions_record,
)
from kai_stream.history.reader import read_broker
from kai_stream.kafka import make_producer, partition_for, read_topic
from kai_stream.settings import KafkaSettings
from kai_stream.streams.engine import PartitionEngine
from kai_stream.streams.exactly_once import MAX_TRANSACTION_TIMEOUT_MS, TransactionalLoop
from kai_stream.streams.runtime import SchedulerRuntime
from kai_stream.topics import TopicNames, create_topics, load_specs
from tests.conftest import settings_for
from tests.log_checks import assert_chained, assert_sound

PARTITIONS = {spec.name: spec.partitions for spec in load_specs()}
HOME = partition_for("default", PARTITIONS["cluster-events"])
TRANSACTION_TIMEOUT_MS = 1000
STALL_S = 13.0
"""Past the session timeout (2 s), the transaction timeout, and the broker's sweep of timed-out transactions
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 10 s by default)."""
RECOVERY_S = 45.0
"""How long after the stall the pod created afterwards must be bound (a rejoin, a rebuild, a cycle)."""


def _pod(name: str, created: float) -> PodObserved:
    spec = PodSpec(namespace="ns", name=name, uid=f"u-{name}", queue="q", created=created,
                   requests=Resources(gpu_milli=1000))
    return PodObserved(event_id=f"e-{name}", ts=created, pod=spec)


def _cluster() -> list[ClusterEvent]:
    node = NodeSpec(name="n1", allocatable=Resources(gpu_milli=8000, cpu_milli=10**6, memory=2**40))
    queue = QueueSpec(name="q", resources=QueueResources(gpu=QueueResource(quota=-1)))
    return [NodeObserved(event_id="n1", ts=0.0, node=node), QueueObserved(event_id="q", ts=0.0, queue=queue)]


async def _publish(settings: KafkaSettings, names: TopicNames, events: list[ClusterEvent]) -> None:
    producer = make_producer(settings)
    await producer.start()
    try:
        for event in events:
            await producer.send(names.cluster_events, dumps(event), key=b"default", partition=HOME)
        await producer.flush()
    finally:
        await producer.stop()


async def _decisions(settings: KafkaSettings, names: TopicNames) -> list[Decision]:
    decoded = [loads_decisions_record(r.value or b"") for r in await read_topic(settings, names.decisions)]
    return [d for d in decoded if isinstance(d, DecisionBase)]


async def _binds(settings: KafkaSettings, names: TopicNames) -> Counter[str]:
    return Counter(d.name for d in await _decisions(settings, names) if isinstance(d, BindRequested))


async def _bound(
    settings: KafkaSettings, names: TopicNames, pod: str, within_s: float, loop: asyncio.Task[Any]
) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within_s:
        assert not loop.done(), loop
        if pod in await _binds(settings, names):
            return time.monotonic() - started
        await asyncio.sleep(0.2)
    raise AssertionError(f"{pod} not bound within {within_s} s")


async def _unused_send(topic: str, partition: int, key: bytes, record: Model) -> Any:
    raise AssertionError("the loop replaces the runtime's send")


def _stall(stalls: list[float], call: Callable[..., Any], *, every: bool = False) -> Callable[..., Any]:
    """``call``, the first time (``every``: every time) held up by ``STALL_S`` of blocking the event loop (no
    heartbeat, no fetch)."""

    def stalled(*args: Any, **kwargs: Any) -> Any:
        if every or not stalls:
            stalls.append(time.monotonic())
            time.sleep(STALL_S)
        return call(*args, **kwargs)

    return stalled


@pytest.mark.kafka
@pytest.mark.parametrize("instance_id", [None, "static-0"])
@pytest.mark.parametrize("stall", ["cycle", "every cycle", "transaction", "every transaction"])
async def test_a_batch_outlasting_session_and_transaction_recovers(
    kafka_broker: str, topic_prefix: str, instance_id: str | None, stall: str,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """``cycle``: the first cycle stalls before its batch sent anything (the transaction is not open on the broker
    yet: it commits, only the group session is lost); ``every cycle``: so is every cycle, the first after each
    rejoin's rebuild included. ``transaction``: the first batch stalls after its decisions
    were delivered, inside its open transaction: the broker aborts it and fences the producer, so the batch fails
    and the loop rebuilds and decides again. ``every transaction``: every batch stalls so, as every 10,000-pod batch
    would: only a longer transaction timeout lets one commit."""
    settings = settings_for(kafka_broker)
    names = TopicNames.with_prefix(topic_prefix)
    await create_topics(settings, names=names)
    runtime = SchedulerRuntime(settings, names, SchedulerConfig(), _unused_send,
                               partitions=PARTITIONS["decisions"])
    processor = TransactionalLoop(
        runtime, settings, names, group_id=f"{topic_prefix}processor", batch_max=5000, snapshot_interval_s=0,
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, commit_interval_s=0.2,
        instance_id=None if instance_id is None else f"{topic_prefix}{instance_id}",
    )
    stalls = list[float]()
    if stall.endswith("cycle"):
        monkeypatch.setattr(PartitionEngine, "cycle", _stall(stalls, PartitionEngine.cycle, every=stall != "cycle"))
    else:
        write_snapshot = processor._write_snapshot  # called inside the transaction, after its deliveries
        monkeypatch.setattr(processor, "_write_snapshot", _stall(stalls, write_snapshot, every=stall != "transaction"))
    caplog.set_level(logging.WARNING, logger="kai_stream.streams.exactly_once")
    await _publish(settings, names, [*_cluster(), _pod("before", 1.0)])
    running = asyncio.create_task(processor.run())
    try:
        first = await _bound(settings, names, "before", STALL_S + RECOVERY_S, running)
        assert stalls, "the stall never happened"
        await _publish(settings, names, [_pod("after", 2.0)])
        waited = await _bound(settings, names, "after", RECOVERY_S, running)
        print(f"\nstalled {STALL_S} s in the {stall}: the pod there bound after {first:.2f} s, the pod created"
              f" afterwards {waited:.2f} s after it was")
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running

    if stall.endswith("transaction"):
        assert "batch failed, rebuilding" in caplog.text, "the stalled transaction was expected to be fenced"
    binds = await _binds(settings, names)
    assert binds == Counter({"before": 1, "after": 1}), binds
    history = await read_broker(settings, names)
    assert_chained(await _decisions(settings, names))
    assert_sound(history)


def test_only_a_transaction_open_past_its_timeout_raises_it() -> None:
    runtime = SchedulerRuntime(KafkaSettings(), TopicNames(), SchedulerConfig(), _unused_send, partitions=8)
    processor = TransactionalLoop(runtime, KafkaSettings(), TopicNames(), group_id="g", batch_max=1,
                                  snapshot_interval_s=0, transaction_timeout_ms=10_000)
    processor._outlasted(0, 5.0)  # failed for another reason: the broker had not aborted it
    assert processor.transaction_timeout_ms == 10_000
    processor._outlasted(0, 12.0)
    assert processor.transaction_timeout_ms == 24_000
    processor._outlasted(0, 24.5)
    assert processor.transaction_timeout_ms == 49_000
    processor._outlasted(0, 3600.0)
    assert processor.transaction_timeout_ms == MAX_TRANSACTION_TIMEOUT_MS
