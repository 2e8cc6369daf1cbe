"""Where engine snapshots go on Tansu, which keeps every record of a topic: generations of one-partition topics per
cluster-events partition, ``<state topic>-p<partition>-g<generation>``, the old ones deleted whole.

Tansu 0.6.0 neither compacts nor applies retention (``tests/broker/test_contract.py``), and its DeleteRecords is
not implemented (the request panics its storage with ``not yet implemented`` and the connection closes). It does
delete topics: DeleteTopics drops the records from its memory and from its s3 bucket's directory.

Writing (``Generations``, one per ``AckedSnapshots``):

* a generation holds at most ``per_generation`` snapshots; the next one goes to a new topic, one generation above
  every topic of the partition the broker lists at that moment; so does the first snapshot of an engine this
  writer has not written yet (a start, a reassignment, a rebuild after a failure; engines told apart by ``id``),
  so a writer that gets a partition back does not go on below the generations its other owner wrote;
* once a snapshot is acknowledged in generation ``g``, the partition's generations below ``g - 1`` are deleted:
  the previous one stays (``per_generation`` snapshot intervals at least, two minutes at the default 30 s), so a
  reader that listed the topics just before the rotation still finds it;
* a topic is dropped from the producer's metadata before it is deleted: Tansu creates any topic a metadata
  request names, so the producer's next refresh would bring it back.

So a partition holds at most ``2 * per_generation + 1`` snapshots, and ``2 * per_generation`` once a rotation's
deletion is done.

Reading (``candidates``): the partition's generations from the highest down, then the partition of the state
topic itself (Apache Kafka's compacted topic, which has no generations). The first that holds a snapshot of the
partition has the latest acknowledged one: a generation is deleted only after a higher one holds a snapshot.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

log = logging.getLogger(__name__)

SNAPSHOTS_PER_GENERATION = 4


def generation_topic(base: str, partition: int, generation: int) -> str:
    return f"{base}-p{partition}-g{generation}"


def generations(topics: Iterable[str], base: str, partition: int) -> list[int]:
    """The generations of ``partition``'s snapshots among ``topics``, lowest first."""
    pattern = re.compile(re.escape(f"{base}-p{partition}-g") + r"(0|[1-9][0-9]*)")
    return sorted(int(found[1]) for topic in topics if (found := pattern.fullmatch(topic)))


def candidates(
    topics: Iterable[str], base: str, partition: int, base_partitions: Iterable[int]
) -> list[TopicPartition]:
    """Where ``partition``'s latest snapshot may be, in the order to look: its generations from the highest down,
    then the base topic's partition when the base topic has it."""
    listed = reversed(generations(topics, base, partition))
    found = [TopicPartition(generation_topic(base, partition, g), 0) for g in listed]
    if partition in set(base_partitions):
        found.append(TopicPartition(base, partition))
    return found


@dataclass
class _Current:
    generation: int
    engine_id: int
    written: int = 0
    stale: list[int] = field(default_factory=list)


class Generations:
    """Which topic a partition's next snapshot goes to, and the deletion of the generations it supersedes."""

    def __init__(self, admin: AIOKafkaAdminClient, producer: AIOKafkaProducer, base: str, per_generation: int) -> None:
        if per_generation < 1:
            raise ValueError(f"per_generation must be at least 1, got {per_generation}")
        self.admin = admin
        self.producer = producer
        self.base = base
        self.per_generation = per_generation
        self._current: dict[int, _Current] = {}

    async def topic_for(self, partition: int, engine_id: int) -> str:
        """The topic of ``partition``'s next snapshot of the engine ``engine_id`` (created when it is a new one)."""
        current = self._current.get(partition)
        if current is None or current.engine_id != engine_id or current.written >= self.per_generation:
            listed = generations(await self.admin.list_topics(), self.base, partition)
            known = [current.generation] if current is not None else []
            generation = max([*listed, *known], default=-1) + 1
            await self._create(generation_topic(self.base, partition, generation))
            stale = sorted({g for g in [*listed, *(current.stale if current else [])] if g < generation - 1})
            current = self._current[partition] = _Current(generation, engine_id, stale=stale)
        return generation_topic(self.base, partition, current.generation)

    async def acknowledged(self, partition: int) -> None:
        """A snapshot of ``partition`` is in its current generation: delete what that supersedes."""
        current = self._current[partition]
        current.written += 1
        if not current.stale:
            return
        doomed = [generation_topic(self.base, partition, g) for g in current.stale]
        live = [generation_topic(self.base, p, c.generation) for p, c in sorted(self._current.items())]
        self.producer.client.set_topics(live)
        try:
            await self.admin.delete_topics(doomed)
        except Exception as exc:  # tried again after the partition's next snapshot
            log.warning("processor: deleting old snapshot topics %s failed: %r", doomed, exc)
            return
        current.stale = []

    async def _create(self, topic: str) -> None:
        with contextlib.suppress(TopicAlreadyExistsError):
            await self.admin.create_topics([NewTopic(topic, 1, 1)])
