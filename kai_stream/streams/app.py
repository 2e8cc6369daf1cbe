"""The faust app of the scheduler processor (one per process), configured from the environment.

On Apache Kafka the app only hosts the processor (timers, health, the fair-share table under the group
``<app id>-tables``): records are consumed in bulk and published in transactions by ``exactly_once.py`` in the
group ``<app id>``. On Tansu, which has no transactions, a faust agent consumes them (``agents.py``).

faust-streaming 0.15.3 runs on the embedded Tansu broker (agents, consumer group, rebalance, tables) once
four things are worked around, here and in ``agents.py`` (the first three only on Tansu, ``quirks.py``):

* fetch wait: faust hard-codes the consumer's ``fetch_max_wait_ms`` to 1500 and Tansu answers a long-poll
  fetch only when the wait expires (a wait per hop: benchmarks/README.md), so the transport below lowers it;
* table recovery: faust asks ``end_offsets()`` where a changelog ends, which Tansu answers wrongly (recovery
  stalled, "No event received for active tp"); the consumer thread below reads the end from a fetch's
  high-watermark instead. Tables are caches only anyway (``tables.py``): scheduler state is rebuilt from
  cluster-events on assignment (``runtime.py``);
* holes: Tansu can answer a fetch with a batch past one it has not stored yet, and the consumer would move past
  that record for good (a pod never scheduled); the consumer's fetch answers are cut at the hole
  (``fetchgaps.py``);
* commits: faust commits the longest run of acknowledged offsets, and after restarts with re-deliveries
  that run stopped at a gap for good; the agent commits each batch itself once its decisions are
  published.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import faust
from aiokafka import TopicPartition
from faust import tables as faust_tables
from faust.auth import SASLCredentials, SSLCredentials
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from kai_stream import succession
from kai_stream.fetchgaps import gap_guarded
from kai_stream.fetchwait import governed
from kai_stream.internals import set_fetch_wait
from kai_stream.kafka import READ_TO_END_WAIT_MS, UNIT_MAX_BYTES, make_consumer
from kai_stream.quirks import tansu_workarounds
from kai_stream.settings import KafkaSettings
from kai_stream.streams.settings import ProcessorSettings
from kai_stream.topics import TopicNames, load_specs

settings = ProcessorSettings()
kafka = KafkaSettings()
names = TopicNames.with_prefix(settings.topic_prefix)
PARTITIONS = {spec.name: spec.partitions for spec in load_specs()}


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        if not tansu_workarounds(kafka):
            return consumer
        succession.fence_now(kafka, settings.app_id)  # a dynamic member: a dead predecessor leaves the group first
        set_fetch_wait(consumer, settings.fetch_max_wait_ms)
        governed(consumer, settings.fetch_max_wait_ms, kafka.fetch_max_wait_limit_ms)
        return gap_guarded(consumer, kafka.fetch_hole_patience_s)

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        """On Tansu, end offsets from fetch responses (what table recovery waits for), not ``end_offsets()``."""
        if not tansu_workarounds(kafka):
            ends: Mapping[TP, int] = await super()._highwaters(partitions)
            return ends
        probe = make_consumer(kafka, group_id=None, fetch_max_wait_ms=READ_TO_END_WAIT_MS)
        await probe.start()
        try:
            tps = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
            probe.assign(tps)
            await probe.seek_to_beginning(*tps)
            deadline = time.monotonic() + 30.0
            while any(probe.highwater(tp) is None for tp in tps) and time.monotonic() < deadline:
                await probe.getmany(timeout_ms=100, max_records=1)
            return {tp: probe.highwater(TopicPartition(tp.topic, tp.partition)) or 0 for tp in partitions}
        finally:
            await probe.stop()


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class TableManager(faust_tables.TableManager):
    """faust's table manager without its unconditional 1 s sleep before starting recovery, when the app has no
    table (the default, ``fair_share_table`` off): nothing is recovered, and the sleep delayed every start and
    restart of the processor by a second before it asked to join its group."""

    async def on_start(self) -> None:
        if len(self):
            await super().on_start()
            return
        await self._update_channels()
        await self.app.topics.wait_for_subscriptions()  # one join, with the final subscription
        await self.recovery.start()


class Transport(faust_aiokafka.Transport):
    """faust's aiokafka transport with a short fetch wait."""

    Consumer = _Consumer


def _credentials() -> Any:
    context = kafka.ssl_context()
    if kafka.sasl_mechanism is not None:
        return SASLCredentials(
            username=kafka.sasl_username,
            password=kafka.password(),
            ssl_context=context,
            mechanism=kafka.sasl_mechanism,
        )
    if context is not None:
        return SSLCredentials(context)
    return None


BULK = not tansu_workarounds(kafka)
"""Whether ``exactly_once.py`` consumes (Apache Kafka) rather than a faust agent (Tansu)."""

app = faust.App(
    f"{settings.app_id}-tables" if BULK else settings.app_id,
    broker=f"kafka://{kafka.bootstrap_servers.split(',')[0]}",
    broker_credentials=_credentials(),
    store="memory://",
    TableManager=TableManager,
    autodiscover=False,
    origin="kai_stream.streams",
    web_enabled=False,
    datadir=settings.data_dir,
    topic_partitions=PARTITIONS["cluster-events"],
    topic_allow_declare=True,
    consumer_auto_offset_reset="earliest",
    broker_session_timeout=kafka.session_timeout_ms / 1000,
    broker_heartbeat_interval=kafka.heartbeat_interval_ms / 1000,
    broker_commit_interval=settings.commit_interval_s,
    producer_linger=0.001,
    producer_max_batch_size=UNIT_MAX_BYTES,
    producer_max_request_size=UNIT_MAX_BYTES + 2**20,
    # static on Kafka too: the app's tasks (the transactional loop) start only once its table group has assigned
    consumer_group_instance_id=f"{settings.instance_id}-tables" if BULK and settings.instance_id else None,
)
app.transport = Transport(app.conf.broker_consumer, app)
