"""The processor's state changelog on Apache Kafka: a compacted topic holding, per cluster-events partition, the
latest snapshot of its ``PartitionEngine`` and where the logs stood when it was taken. (On Tansu, which compacts
nothing, the snapshots go to generations of topics named after it instead: ``snapshot_generations.py``.)

A restarted (or newly assigned) processor starts from the snapshot and folds only what cluster-events and the
decisions topic hold past it, instead of both logs from offset 0. A snapshot is taken after the processor's
transaction for a batch committed and written in a later one (``exactly_once.py``), so it is never visible ahead of
the decisions it reflects. It is encoded in a forked child (``encode_aside``): the child pickles its copy-on-write
view of the engine while the processor goes on deciding (encoding on the event loop held every record that
arrived meanwhile: 0.27 CPU-s at 10,000 pods on the shared VM, every snapshot interval).

A snapshot is usable only by the same code version and config hash (else the processor rebuilds from the logs).
Its body is a zlib-compressed pickle read back by an unpickler that builds nothing but the engine's own classes
(``kai_stream.core``'s models and state, ``streams.engine``) and a deque; still, the topic holds the scheduler's
state and should be writable by the processor alone (as its consumer group and the decisions topic are).
"""

from __future__ import annotations

import asyncio
import io
import os
import pickle
import signal
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from kai_stream.core.gcpause import paused_gc
from kai_stream.internals import kafka_client
from kai_stream.kafka import READ_TO_END_WAIT_MS, make_admin, make_consumer, read_to_end
from kai_stream.settings import KafkaSettings
from kai_stream.streams import snapshot_generations as generations
from kai_stream.streams.engine import PartitionEngine

MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
_HEADER = struct.Struct(">qq")
_ALLOWED_MODULES = ("kai_stream.core.", "kai_stream.streams.engine")
_ALLOWED_GLOBALS = frozenset({("collections", "deque")})
_LISTINGS = 3


def topic_name(app_id: str) -> str:
    """The state topic of a processor group (named after it, as faust names its changelogs)."""
    return f"{app_id}-engine-changelog"


@dataclass(frozen=True)
class Snapshot:
    """An engine as it stood after a transaction: it has folded cluster-events through ``engine.offset`` and every
    decision of its partition before ``decisions_from``."""

    engine: PartitionEngine
    decisions_from: int


class _EngineUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = super().find_class(module, name)
        own = module.startswith(_ALLOWED_MODULES) and isinstance(found, type) and found.__module__ == module
        if not own and (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"snapshot names {module}.{name}, which is not engine state")
        return found


def encode(snapshot: Snapshot) -> bytes:
    body = zlib.compress(pickle.dumps(snapshot.engine, protocol=pickle.HIGHEST_PROTOCOL), 1)
    return _HEADER.pack(snapshot.engine.offset, snapshot.decisions_from) + body


async def encode_aside(snapshot: Snapshot) -> bytes:
    """``encode(snapshot)``, computed in a forked child while the event loop goes on: the child encodes the engine
    as it was at the call, whatever the caller changes in it meanwhile."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: encode, write, exit without running anything of the parent's (loop, atexit)
        status = 1
        try:
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, signal.SIG_DFL)
            os.close(read_end)
            with os.fdopen(write_end, "wb") as out:
                out.write(encode(snapshot))
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        value = await asyncio.to_thread(pipe.read)
    _, status = await asyncio.to_thread(os.waitpid, pid, 0)
    if status != 0:
        raise RuntimeError(f"the snapshot's encoding child exited with status {status}")
    return value


def decode(value: bytes) -> Snapshot:
    _, decisions_from = _HEADER.unpack_from(value)
    with paused_gc():  # every object it builds is long-lived state: collections meanwhile would rescan them
        engine = _EngineUnpickler(io.BytesIO(zlib.decompress(value[_HEADER.size :]))).load()
    if not isinstance(engine, PartitionEngine):
        raise pickle.UnpicklingError(f"snapshot holds a {type(engine).__name__}, not a PartitionEngine")
    return Snapshot(engine=engine, decisions_from=decisions_from)


def key(partition: int) -> bytes:
    return str(partition).encode()


async def ensure_topic(settings: KafkaSettings, name: str, partitions: int) -> None:
    """Create the compacted state topic unless it exists (segments roll each minute so the cleaner can drop the
    superseded snapshots), replicated like the offsets topic would be: on up to three brokers."""
    admin = make_admin(settings)
    await admin.start()
    try:
        brokers = (await admin.describe_cluster())["brokers"]
        replicas = max(1, min(3, len(brokers)))
        configs = {
            "cleanup.policy": "compact",
            "max.message.bytes": str(MAX_SNAPSHOT_BYTES),
            "segment.ms": "60000",
            "min.cleanable.dirty.ratio": "0.1",
        }
        if replicas > 1:
            configs["min.insync.replicas"] = "2"
        await admin.create_topics([NewTopic(name, partitions, replicas, topic_configs=configs)])
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()


async def latest(settings: KafkaSettings, topic: str, partition: int, *, usable_by: PartitionEngine) -> Snapshot | None:
    """The last committed snapshot of ``partition``, if there is one that ``usable_by`` (a fresh engine of this
    processor) may continue from: same partition, code version and config hash."""
    return (await latest_of(settings, topic, {partition: usable_by}))[partition]


async def latest_of(
    settings: KafkaSettings, topic: str, usable_by: dict[int, PartitionEngine]
) -> dict[int, Snapshot | None]:
    """``latest`` for several partitions, all read by one consumer, from where the broker lists a partition's
    snapshots (``snapshot_generations.candidates``: Tansu's generation topics, highest first, then the state
    topic). A partition whose candidates all hold no snapshot is listed again, and read again while the listing
    changes (a generation it listed was deleted once a newer one held a snapshot)."""
    consumer = make_consumer(
        settings, group_id=None, fetch_max_wait_ms=READ_TO_END_WAIT_MS, max_partition_fetch_bytes=MAX_SNAPSHOT_BYTES
    )
    await consumer.start()
    values: dict[int, bytes] = {}
    try:
        listed: dict[int, list[TopicPartition]] = {}
        missing = sorted(usable_by)
        for _ in range(_LISTINGS):
            if not missing:
                break
            cluster: Any = await kafka_client(consumer).fetch_all_metadata()
            names, base = cluster.topics(), cluster.partitions_for_topic(topic) or ()
            where = {p: generations.candidates(names, topic, p, base) for p in missing}
            missing = [p for p in missing if where[p] != listed.get(p)]
            listed.update(where)
            values.update(await _last_values(consumer, {p: where[p] for p in missing}))
            missing = [p for p in missing if p not in values]
    finally:
        await consumer.stop()
    return {partition: _usable(values.get(partition), usable_by[partition]) for partition in usable_by}


async def _last_values(consumer: AIOKafkaConsumer, where: dict[int, list[TopicPartition]]) -> dict[int, bytes]:
    """The last snapshot of each partition in the first of its ``where`` that holds one: read backwards from the
    end (the last 2, 8, 32 ... offsets) until it holds the partition's record. An end reported low (Tansu) costs
    nothing: the read goes on to the fetch high-watermark; one reported past the end makes the consumer read the
    partition from its start."""
    found: dict[int, bytes] = {}
    at = {partition: (0, 2) for partition, tps in where.items() if tps}
    while at:
        reading = {where[partition][i]: partition for partition, (i, _) in at.items()}
        tps = sorted(reading)
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, max(0, ends[tp] - at[reading[tp]][1]))
        for record in await read_to_end(consumer, timeout_s=60.0):
            partition = reading.get(TopicPartition(record.topic, record.partition))
            if partition is not None and record.key == key(partition) and record.value:
                found[partition] = record.value
        further: dict[int, tuple[int, int]] = {}
        for tp in tps:
            partition = reading[tp]
            i, back = at[partition]
            if partition in found:
                continue
            if ends[tp] - back > 0:
                further[partition] = (i, back * 4)
            elif i + 1 < len(where[partition]):
                further[partition] = (i + 1, 2)
        at = further
    return found


def _usable(value: bytes | None, usable_by: PartitionEngine) -> Snapshot | None:
    if value is None:
        return None
    snapshot = decode(value)
    engine = snapshot.engine
    if (engine.partition, engine.code_version, engine.config_hash) != (
        usable_by.partition, usable_by.code_version, usable_by.config_hash
    ):
        return None
    engine.config = usable_by.config
    return snapshot
