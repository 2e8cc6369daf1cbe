"""`KubernetesConnector`: list + watch the cluster, publish observed events to cluster-events by pool.

* One task per kind: list, then watch from the list's resourceVersion (bookmarks advance it); a 410
  (or a broken watch) re-lists, and objects missing from the new list get removal events.
* Conversion is ``manifests.object_to_events`` (the same one scenarios use); an object it rejects goes to
  the dead-letter topic with the reason.
* Routing: a pool's events go to ``partition_for(pool)`` keyed by pool; cluster-wide objects (pool ``*``:
  Queue, PriorityClass, Topology) go to every partition, so each pool's partition is a complete log.
* Resume: on start the catalog is rebuilt from the log (while the first lists are fetched; under a supervisor from
  the catalog its predecessor saved and the log after it, ``resume``), so a re-list after a
  restart publishes only what changed in content (see ``catalog``) and the removals of what vanished meanwhile.
  A listed pod or node whose resourceVersion is the one of the last event published for it is not translated
  then: what is new or changed goes out first, and those are translated again (and sent if their translation
  differs, as after a change of a DRA object they depend on) in the background once the kind is listed, unless
  the watch saw them change meanwhile. A restart's first publication does not wait for the cluster's size.
* DRA (``resource.k8s.io``, ``kai_stream.core.dra``): DeviceClasses, ResourceClaims,
  ResourceClaimTemplates and ResourceSlices are kept in a ``DraIndex``, listed before any other kind is; a change
  to one translates again the pods that name claims (or, for a slice, the nodes), and only what changed is sent.
* A Tick per known pool every ``tick_interval_s`` advances event time and triggers scheduling cycles.

Producer sends are pipelined (order per partition is the producer's); a delivery failure stops the
connector with the error. Feedback (``kai_stream.urgency``: our pods observed bound) waits up to
``feedback_linger_ms`` to share a batch; any other event is sent at once with what is held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from kai_stream.connectors.kubernetes import resume
from kai_stream.connectors.kubernetes.catalog import Catalog, removal_event
from kai_stream.connectors.kubernetes.kinds import KINDS, WatchedKind
from kai_stream.connectors.kubernetes.watcher import Obj, follow, list_objects, resource_version
from kai_stream.core.dra import DRA_KINDS, NAMESPACED, DraIndex
from kai_stream.core.events import (
    ALL_POOLS,
    DeadLetter,
    ObjectKey,
    ObservedEvent,
    Tick,
    dumps,
    event_key,
    loads_cluster_event,
    stable_id,
)
from kai_stream.core.manifests import ManifestError, object_to_events
from kai_stream.internals import expedite
from kai_stream.kafka import (
    READ_TO_END_WAIT_MS,
    assign_from_start,
    iter_to_end,
    make_consumer,
    make_producer,
    partition_for,
    send_keyed,
    start_consumer,
)
from kai_stream.quirks import feedback_linger_ms
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames
from kai_stream.urgency import is_feedback

log = logging.getLogger(__name__)


def _object_key(obj: Obj) -> ObjectKey:
    meta = obj.get("metadata") or {}
    namespaced = obj.get("kind") in ("Pod", "PodGroup", *NAMESPACED)
    return (str(obj.get("kind", "")), str(meta.get("namespace") or "default") if namespaced else "", str(meta["name"]))


class KubernetesConnector:
    """Watches one cluster and keeps cluster-events in step with it (see module docstring)."""

    def __init__(
        self,
        api: client.ApiClient,
        kafka: KafkaSettings,
        topics: TopicNames | None = None,
        *,
        scheduler_name: str = "kai-scheduler",
        tick_interval_s: float | None = 1.0,
        watch_timeout_s: int = 300,
        clock: Callable[[], float] = time.time,
        kinds: tuple[WatchedKind, ...] = KINDS,
    ) -> None:
        self.api = api
        self.kafka = kafka
        self.topics = topics or TopicNames()
        self.scheduler_name = scheduler_name
        self.tick_interval_s = tick_interval_s
        self.watch_timeout_s = watch_timeout_s
        self.clock = clock
        self.kinds = kinds
        self.catalog = Catalog()
        self.published = 0
        self.synced = asyncio.Event()
        self._producer: AIOKafkaProducer | None = None
        self._partitions = 0
        self._deliveries: asyncio.Queue[asyncio.Future[Any] | None] = asyncio.Queue()
        self._listed: set[str] = set()
        self.dra = DraIndex()
        self._raw: dict[ObjectKey, Obj] = {}
        """The last Pod and Node objects seen, to translate again when a DRA object they depend on changes."""
        self._dra_ready = asyncio.Event()
        self._catalog_loaded = asyncio.Event()
        self._rechecks: asyncio.Queue[list[tuple[ObjectKey, Obj]]] = asyncio.Queue()
        if not any(k.kind in DRA_KINDS for k in kinds):
            self._dra_ready.set()

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Run until cancelled; raises if the broker rejects a record or the API fails for good."""
        self._producer = make_producer(self.kafka, linger_ms=feedback_linger_ms(self.kafka), max_batch_size=1 << 20)
        await self._producer.start()
        try:
            partitions = await self._producer.partitions_for(self.topics.cluster_events)
            self._partitions = len(partitions)
            tasks = [asyncio.create_task(self._load_catalog(), name="connector-catalog"),
                     asyncio.create_task(self._deliveries_checked(), name="connector-deliveries"),
                     asyncio.create_task(self._recheck(), name="connector-recheck")]
            tasks += [asyncio.create_task(self._run_kind(kind), name=f"connector-{kind.kind}") for kind in self.kinds]
            if self.tick_interval_s:
                tasks.append(asyncio.create_task(self._ticks(self.tick_interval_s), name="connector-ticks"))
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                for task in done:
                    task.result()
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            with contextlib.suppress(Exception):
                await self._producer.flush()
            await self._producer.stop()
            self._producer = None

    async def _load_catalog(self) -> None:
        topic = self.topics.cluster_events
        resumed = resume.load(topic)
        consumer = make_consumer(self.kafka, group_id=None, fetch_max_wait_ms=READ_TO_END_WAIT_MS)
        await start_consumer(consumer)
        try:
            partitions = await assign_from_start(consumer, topic)
            if resumed is not None:
                self.catalog, offsets = resumed
                for tp in partitions:
                    consumer.seek(tp, offsets.get(tp.partition, 0))
            async for batch in iter_to_end(consumer):
                for record in batch:
                    if record.value is None:
                        continue
                    try:
                        self.catalog.record(loads_cluster_event(record.value))
                    except ValueError:
                        continue
            ends = {tp.partition: await consumer.position(tp) for tp in partitions}
        finally:
            await consumer.stop()
        self._catalog_loaded.set()
        await resume.save(topic, Catalog(dict(self.catalog.objects), set(self.catalog.pools)), ends)

    # ------------------------------------------------------------------ publishing

    async def _send(self, event: ObservedEvent) -> None:
        assert self._producer is not None
        value = dumps(event)
        if event.pool == ALL_POOLS:
            targets = [(p, ALL_POOLS) for p in range(self._partitions)]
        else:
            targets = [(partition_for(event.pool, self._partitions), event.pool)]
        urgent = not is_feedback(event)
        for partition, key in targets:
            future = await self._producer.send(
                self.topics.cluster_events, value, key=key.encode(), partition=partition
            )
            if urgent:
                expedite(self._producer, self.topics.cluster_events, partition)
            self._deliveries.put_nowait(future)
        self.catalog.record(event)
        self.published += 1

    async def _deliveries_checked(self) -> None:
        while True:
            future = await self._deliveries.get()
            if future is None:
                return
            await future

    async def flush(self) -> None:
        """Wait until every record sent so far is on the broker."""
        if self._producer is not None:
            await self._producer.flush()

    async def _dead_letter(self, obj: Obj, reason: str) -> None:
        assert self._producer is not None
        letter = DeadLetter.from_raw(
            topic=f"kubernetes/{obj.get('kind', '?')}",
            partition=0,
            offset=0,
            key=None,
            value=orjson.dumps(obj, default=str),
            reason=reason,
            ts=self.clock(),
        )
        future = await send_keyed(self._producer, self.topics.dead_letter, "connector", dumps(letter), urgent=True)
        self._deliveries.put_nowait(future)

    # ------------------------------------------------------------------ per object

    async def _upsert(self, obj: Obj) -> ObjectKey | None:
        kind = obj.get("kind")
        if kind in DRA_KINDS:
            self.dra.upsert(obj)
            await self._translate_dependents(str(kind))
            return _object_key(obj)
        claims_changed = kind == "Pod" and self.dra.pod_seen(obj)
        translated = await self._translate(obj)
        if claims_changed:
            await self._translate_dependents("ResourceClaim")
        return translated

    async def _translate_dependents(self, kind: str) -> None:
        """Translate again what depends on a DRA object of ``kind``: for a ResourceSlice the nodes and every pod
        (whether any node publishes GPU devices decides the device-plugin pods' affinity), else the pods that name
        claims, and for a ResourceClaim the nodes too (a claim no observed pod names holds its allocated devices)."""
        if not self._dra_ready.is_set():
            return
        slices = kind == "ResourceSlice"
        nodes = slices or kind == "ResourceClaim"
        for key, obj in list(self._raw.items()):
            claims = (obj.get("spec") or {}).get("resourceClaims")
            if (key[0] == "Node" and nodes) or (key[0] == "Pod" and (slices or claims)):
                await self._translate(obj)

    async def _translate(self, obj: Obj) -> ObjectKey | None:
        try:
            key = _object_key(obj)
            events = object_to_events(obj, ts=self.clock(), scheduler_name=self.scheduler_name, dra=self.dra)
        except (ManifestError, KeyError) as exc:
            log.warning("connector: rejected object: %s", exc)
            await self._dead_letter(obj, str(exc))
            return None
        if key[0] in ("Pod", "Node"):
            self._raw[key] = obj
        if not events:
            await self._remove(key, resource_version(obj))
            return key
        for event in events:
            ev_key = event_key(event) or key
            known = self.catalog.objects.get(ev_key)
            if known is not None and known.pool != event.pool and known.pool != ALL_POOLS:
                await self._remove(ev_key, resource_version(obj))
            if self.catalog.is_new(ev_key, event):
                await self._send(event)
        return key

    async def _remove(self, key: ObjectKey, version: str) -> None:
        if key[0] in DRA_KINDS:
            self.dra.remove(*key)
            await self._translate_dependents(key[0])
            return
        raw = self._raw.pop(key, None)
        if raw is not None and key[0] == "Pod" and self.dra.pod_seen(raw, present=False):
            await self._translate_dependents("ResourceClaim")
        known = self.catalog.objects.get(key)
        if known is None:
            return
        event = removal_event(key, known, ts=self.clock(), version=version)
        if event is None:
            self.catalog.objects.pop(key, None)
            return
        await self._send(event)

    # ------------------------------------------------------------------ list + watch

    def _unchanged(self, obj: Obj) -> ObjectKey | None:
        """The key of a listed pod or node that is, by its resourceVersion, what was last published of it."""
        if obj.get("kind") not in ("Pod", "Node") or not (obj.get("metadata") or {}).get("name"):
            return None
        key = _object_key(obj)
        return key if self.catalog.unchanged(key, resource_version(obj)) else None

    async def _relist(self, kind: WatchedKind) -> str:
        items, version = await list_objects(kind, kind.list_call(self.api))
        await self._catalog_loaded.wait()
        if kind.kind not in DRA_KINDS:
            await self._dra_ready.wait()
        if kind.kind == "Pod":
            for obj in items:
                self.dra.pod_seen(obj)
        seen: set[ObjectKey] = set()
        unchanged: list[tuple[ObjectKey, Obj]] = []
        for obj in items:
            key = self._unchanged(obj)
            if key is not None:
                self._raw[key] = obj
                unchanged.append((key, obj))
            else:
                key = await self._upsert(obj)
            if key is not None:
                seen.add(key)
        gone = [k for k in self.dra.objects if k[0] == kind.kind] if kind.kind in DRA_KINDS else []
        for key in [*self.catalog.keys_of(kind.kind), *gone]:
            if key not in seen:
                await self._remove(key, version)
        self._mark_listed(kind.kind)
        if unchanged:
            self._rechecks.put_nowait(unchanged)
        return version

    async def _recheck(self) -> None:
        """Translate the objects a re-list found unchanged by version, one at a time between the watches' events,
        skipping each one the watch has seen again since (its newer version was translated then)."""
        while True:
            for key, obj in await self._rechecks.get():
                await asyncio.sleep(0)
                if self._raw.get(key) is obj:
                    await self._translate(obj)

    def _mark_listed(self, kind: str) -> None:
        self._listed.add(kind)
        if all(k.kind in self._listed for k in self.kinds if k.kind in DRA_KINDS):
            self._dra_ready.set()
        if len(self._listed) == len(self.kinds):
            self.synced.set()

    async def _run_kind(self, kind: WatchedKind) -> None:
        async def changed(change: str, obj: Obj, version: str) -> None:
            if change == "DELETED":
                await self._remove(_object_key(obj), version)
            else:
                await self._upsert(obj)

        def unserved(exc: ApiException) -> bool:
            if exc.status == 404 or (exc.status == 403 and kind.kind in DRA_KINDS):
                why = "not served by this cluster" if exc.status == 404 else "forbidden to this account"
                log.warning("connector: %s %s; not watched", kind.kind, why)
                self._mark_listed(kind.kind)
                return True
            return False

        await follow(
            kind, kind.list_call(self.api), relist=lambda: self._relist(kind), changed=changed,
            timeout_s=self.watch_timeout_s, who="connector", unserved=unserved,
        )

    # ------------------------------------------------------------------ ticks

    async def tick(self) -> None:
        """Publish one Tick per known pool now."""
        now = self.clock()
        for pool in self.catalog.tick_pools():
            await self._send(Tick(event_id=stable_id("tick", pool, repr(now)), ts=now, pool=pool))

    async def publish(self, event: ObservedEvent) -> None:
        """Publish an event of the caller's (``simulate --live``'s round barriers) in log order with ours, and
        wait until it is on the broker."""
        await self._send(event)
        await self.flush()

    async def _ticks(self, interval_s: float) -> None:
        await self.synced.wait()
        while True:
            await asyncio.sleep(interval_s)
            await self.tick()
