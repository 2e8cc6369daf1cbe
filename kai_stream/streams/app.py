"""The faust app of the scheduler processor (one per process), configured from the environment.

Faust-streaming 0.15.3 runs on the embedded Tansu broker with two adjustments made here:

* the consumer's ``fetch_max_wait_ms`` (hard-coded to 1500 in faust) is lowered: Tansu does not answer a
  long-poll fetch early when data arrives, so the wait is the latency of every hop;
* tables are caches only (``tables.py``): scheduler state is rebuilt from cluster-events on assignment
  (``runtime.py``), because changelog recovery trusts end offsets, which Tansu reports wrongly.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.auth import SASLCredentials, SSLCredentials
from faust.transport.drivers import aiokafka as faust_aiokafka

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
        consumer._fetch_max_wait_ms = settings.fetch_max_wait_ms
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    """faust's aiokafka transport with a short fetch wait."""

    Consumer = _Consumer


def _credentials() -> Any:
    context = kafka.ssl_context()
    if kafka.sasl_mechanism is not None:
        return SASLCredentials(
            username=kafka.sasl_username,
            password=kafka.sasl_password,
            ssl_context=context,
            mechanism=kafka.sasl_mechanism,
        )
    if context is not None:
        return SSLCredentials(context)
    return None


app = faust.App(
    settings.app_id,
    broker=f"kafka://{kafka.bootstrap_servers.split(',')[0]}",
    broker_credentials=_credentials(),
    store="memory://",
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
)
app.transport = Transport(app.conf.broker_consumer, app)
