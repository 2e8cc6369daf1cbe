"""A processor runtime in a process of its own, for the cycle-atomicity test to kill -9 while it publishes.

``python -m tests.streams.cycle_publisher BOOTSTRAP TOPIC_PREFIX MODE``: reads its pool's cluster-events
partition, runs one ``SchedulerRuntime.submit`` over it (rebuilding from the log first, as a restarted processor
does), prints ``submitted N`` once the records are handed to the producer, ``delivered`` after each delivery the
broker acknowledged, then ``done`` and waits to be killed. MODE ``unit`` publishes each pool's cycle as one record
batch (the processor agent's way, ``kafka.send_unit``); ``records`` publishes record by record with the producer's
default batch size, as processors did before.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import Model, dumps
from kai_stream.kafka import UNIT_MAX_BYTES, make_producer, partition_for, read_topic, send_unit
from kai_stream.settings import KafkaSettings
from kai_stream.streams.runtime import InRecord, SchedulerRuntime
from kai_stream.topics import TopicNames

PARTITIONS = 8
POOL = "default"


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(bootstrap: str, prefix: str, mode: str) -> None:
    settings = KafkaSettings(bootstrap_servers=bootstrap, client_id="cycle-publisher")
    names = TopicNames.with_prefix(prefix)
    unit = mode == "unit"
    sizes = {"max_batch_size": UNIT_MAX_BYTES, "max_request_size": UNIT_MAX_BYTES + 2**20} if unit else {}
    producer = make_producer(settings, **sizes)
    await producer.start()

    async def send(topic: str, partition: int, key: bytes, record: Model) -> Any:
        return await producer.send(topic, dumps(record), key=key, partition=partition)

    async def send_whole(topic: str, partition: int, key: bytes, values: Sequence[bytes]) -> Any:
        return await send_unit(producer, topic, partition, key, values)

    runtime = SchedulerRuntime(
        settings, names, SchedulerConfig(), send, partitions=PARTITIONS, send_unit=send_whole if unit else None
    )
    home = partition_for(POOL, PARTITIONS)
    records = [
        InRecord(r.partition, r.offset, r.key, r.value, r.timestamp)
        for r in await read_topic(settings, names.cluster_events)
        if r.partition == home
    ]
    published, deliveries = await runtime.submit(records)
    _say(f"submitted {len(published)}")
    for delivery in deliveries:
        await delivery
        _say("delivered")
    _say("done")
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
