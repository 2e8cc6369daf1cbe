"""The processor's state changelog on Apache Kafka: a compacted topic holding, per cluster-events partition, the
latest snapshot of its ``PartitionEngine`` and where the logs stood when it was taken.

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

from aiokafka import TopicPartition
from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from kai_stream.core.gcpause import paused_gc
from kai_stream.kafka import READ_TO_END_WAIT_MS, make_admin, make_consumer, read_to_end, topic_partitions
from kai_stream.settings import KafkaSettings
from kai_stream.streams.engine import PartitionEngine

MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
_HEADER = struct.Struct(">qq")
_ALLOWED_MODULES = ("kai_stream.core.", "kai_stream.streams.engine")
_ALLOWED_GLOBALS = frozenset({("collections", "deque")})


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
    """``latest`` for several partitions, all read by one consumer: backwards from each partition's end (the last
    2, 8, 32 ... offsets) until it holds the partition's record. A topic without compaction (Tansu) keeps every
    snapshot; only the last ones are read. An end reported low (Tansu) costs nothing: the read goes on to the fetch
    high-watermark; one reported past the end makes the consumer read the partition from its start."""
    consumer = make_consumer(
        settings, group_id=None, fetch_max_wait_ms=READ_TO_END_WAIT_MS, max_partition_fetch_bytes=MAX_SNAPSHOT_BYTES
    )
    await consumer.start()
    values: dict[int, list[bytes]] = {partition: [] for partition in usable_by}
    try:
        present = set(await topic_partitions(consumer, topic))
        missing = sorted(p for p in usable_by if p in present)
        back = 2
        while missing:
            tps = [TopicPartition(topic, p) for p in missing]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                consumer.seek(tp, max(0, ends[tp] - back))
            for record in await read_to_end(consumer, timeout_s=60.0):
                if record.key == key(record.partition) and record.value and record.partition in values:
                    values[record.partition].append(record.value)
            missing = [tp.partition for tp in tps if not values[tp.partition] and ends[tp] - back > 0]
            back *= 4
    finally:
        await consumer.stop()
    return {partition: _usable(found, usable_by[partition]) for partition, found in values.items()}


def _usable(values: list[bytes], usable_by: PartitionEngine) -> Snapshot | None:
    if not values:
        return None
    snapshot = decode(values[-1])
    engine = snapshot.engine
    if (engine.partition, engine.code_version, engine.config_hash) != (
        usable_by.partition, usable_by.code_version, usable_by.config_hash
    ):
        return None
    engine.config = usable_by.config
    return snapshot
