"""The one module that reaches into faust's, aiokafka's and aiohttp's private attributes (names with a leading
``_``).

Rule: everywhere else kai-stream uses these libraries' public API only (aiokafka's ``commit``, ``committed``,
``highwater``, constructor settings; faust's app settings and documented hooks). What is here has no public
equivalent, and each function says why; the libraries are pinned to a minor version in pyproject.toml and each
function runs against the pinned versions in the tests (``tests/broker``, and the processor and binder end to end
in ``tests/e2e``, ``tests/binder``). A new private access
goes here, with its reason, or nowhere. (Overriding faust's consumer-thread and table-manager hooks in
``streams/app.py`` is subclassing, not attribute access, and stays there.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient


def kafka_client(owner: AIOKafkaConsumer | AIOKafkaAdminClient) -> AIOKafkaClient:
    """The network client of a consumer or admin client. aiokafka offers no hook on a consumer's fetch responses
    (``fetchgaps.py`` cuts them at holes, ``fetchwait.py`` watches them) and no all-topics metadata refresh that
    leaves the subscription alone (``kafka.topic_partitions``, ``topics.py``): both wrap or call the client."""
    client: AIOKafkaClient = owner._client
    return client


def set_fetch_wait(consumer: AIOKafkaConsumer, wait_ms: int) -> None:
    """Change a consumer's ``fetch_max_wait_ms`` while it runs. aiokafka reads it only in the constructor, faust
    constructs the processor's consumer with 1500 ms hard-coded (no setting reaches it), and ``fetchwait.py``
    adapts the wait to what the broker answers."""
    consumer._fetch_max_wait_ms = wait_ms
    fetcher = getattr(consumer, "_fetcher", None)  # None before start(): the fetcher is made from the consumer's
    if fetcher is not None:
        fetcher._fetch_max_wait_ms = wait_ms


def member_id(consumer: AIOKafkaConsumer | None) -> str:
    """The member id a consumer holds in its group ("" before it joined). aiokafka keeps it on its coordinator
    only; ``succession.py`` needs it to remove a dead worker from the group at once."""
    coordinator = getattr(consumer, "_coordinator", None)
    return str(getattr(coordinator, "member_id", "") or "")


def expedite(producer: AIOKafkaProducer, topic: str, partition: int) -> None:
    """Send what ``producer`` holds for the partition now instead of when its linger runs out (aiokafka has no
    flush of one partition; ``flush()`` waits for every delivery).

    The held batch stays open: records appended before the sender takes it (while a request to the broker is in
    flight) still join it. Relies on aiokafka's accumulator (``MessageBatch`` linger, the sender's waiter),
    checked by ``tests/broker/test_expedite.py``.
    """
    accumulator: Any = producer._message_accumulator
    if accumulator._linger_time == 0:
        return  # nothing is held without a linger (on Apache Kafka, quirks.feedback_linger_ms)
    for batch in accumulator._batches.get(TopicPartition(topic, partition), ()):
        batch._linger_time = 0.0
    waiter = accumulator._waiter_future
    if not waiter.done():
        waiter.set_result(None)


def faust_kafka_producer(producer: Any) -> AIOKafkaProducer:
    """The aiokafka producer under faust's (started on first use). faust's ``Producer.send`` takes one record at a
    time; a cycle's records go as one record batch (``kafka.send_unit``), which needs aiokafka's
    ``create_batch``/``send_batch``."""
    kafka_producer: AIOKafkaProducer = producer._ensure_producer()
    return kafka_producer


def faust_kafka_consumer(consumer: Any) -> AIOKafkaConsumer | None:
    """The aiokafka consumer under faust's (None before its thread made one); faust exposes none."""
    found: AIOKafkaConsumer | None = getattr(getattr(consumer, "_thread", None), "_consumer", None)
    return found


async def faust_commit(consumer: Any, offsets: Mapping[Any, int]) -> bool:
    """Commit exactly ``offsets`` through faust's consumer, and move faust's record of what is committed along so
    its own periodic commit never writes an older offset over them. faust's public ``commit()`` commits the
    longest run of acknowledged offsets it tracks, which after re-deliveries can stop at a gap for good
    (``streams/agents.py``); aiokafka's public ``commit(offsets)`` would leave faust's record behind."""
    if not await consumer._commit(offsets):
        return False
    committed = consumer._committed_offset
    for tp, offset in offsets.items():
        if (committed.get(tp) or -1) < offset:
            committed[tp] = offset
    return True


def disable_env_lookups(session: Any) -> None:
    """Switch off ``trust_env`` of an aiohttp session made by kubernetes-asyncio (which hard-codes it on and
    makes the session itself): aiohttp sets it only in ``ClientSession``'s constructor."""
    session._trust_env = False
