"""What the connector has published, per object: the basis for dedupe, removals and resume.

The catalog maps an object key (kind, namespace, name) to the id of the last event published for it,
its pool, uid, resource version and content digest (computed when first compared: a catalog rebuilt from a long
log digests only what a re-list compares). An observed event is new only when its content (the typed event less
``event_id``, ``ts`` and ``resource_version``) differs from the last one published for the object, so
status writes the scheduler does not read (node heartbeats, Queue/PodGroup status, pod conditions) and
re-lists of unchanged objects publish nothing; a removal forgets the object, so a re-creation is new.
It is rebuilt on start from the cluster-events log itself, so a restarted connector re-lists, skips
unchanged objects, and emits removals for objects that disappeared while it was away (or during a watch
gap that ended in 410).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kai_stream.core.events import (
    ALL_POOLS,
    DEFAULT_POOL,
    AnyEvent,
    NodeObserved,
    NodeRemoved,
    ObjectKey,
    ObservedBase,
    ObservedEvent,
    PodGroupObserved,
    PodGroupRemoved,
    PodObserved,
    PodRemoved,
    QueueObserved,
    QueueRemoved,
    content_digest,
    event_key,
    stable_id,
)


@dataclass
class Published:
    event_id: str
    pool: str
    uid: str
    version: int | None = None
    event: ObservedBase | None = None
    """The event itself until its digest is first asked for."""
    digest: str = ""

    @property
    def content(self) -> str:
        if self.event is not None:
            self.digest, self.event = content_digest(self.event), None
        return self.digest


def _uid(event: AnyEvent) -> str:
    match event:
        case NodeObserved(node=node):
            return node.uid
        case PodObserved(pod=pod):
            return pod.uid
        case QueueObserved(queue=queue):
            return queue.uid
        case PodGroupObserved(pod_group=group):
            return group.uid
    return ""


def removal_event(key: ObjectKey, known: Published, *, ts: float, version: str) -> ObservedEvent | None:
    """The event saying ``key`` is gone (None for kinds the schema has no removal for)."""
    kind, namespace, name = key
    event_id = stable_id("removed", kind, namespace, name, known.uid, version or known.event_id)
    if kind == "Node":
        return NodeRemoved(event_id=event_id, ts=ts, pool=known.pool, name=name)
    if kind == "Pod":
        return PodRemoved(event_id=event_id, ts=ts, pool=known.pool, namespace=namespace, name=name, uid=known.uid)
    if kind == "Queue":
        return QueueRemoved(event_id=event_id, ts=ts, pool=ALL_POOLS, name=name)
    if kind == "PodGroup":
        return PodGroupRemoved(event_id=event_id, ts=ts, pool=known.pool, namespace=namespace, name=name)
    return None


@dataclass
class Catalog:
    objects: dict[ObjectKey, Published] = field(default_factory=dict)
    pools: set[str] = field(default_factory=set)

    def record(self, event: AnyEvent) -> None:
        """Note an event that is now in the log (published by us, or read back on start)."""
        key = event_key(event)
        if key is None or not isinstance(event, ObservedBase):
            return
        if isinstance(event, NodeRemoved | PodRemoved | QueueRemoved | PodGroupRemoved):
            self.objects.pop(key, None)
            return
        version = getattr(event, "resource_version", None)
        self.objects[key] = Published(event.event_id, event.pool, _uid(event), version, event)
        if event.pool != ALL_POOLS:
            self.pools.add(event.pool)

    def is_new(self, key: ObjectKey, event: ObservedBase) -> bool:
        """Whether ``event`` says something about ``key`` that the last published event did not."""
        known = self.objects.get(key)
        return known is None or known.content != content_digest(event)

    def unchanged(self, key: ObjectKey, version: str) -> bool:
        """Whether the last event published for ``key`` was of this very resourceVersion of the object."""
        known = self.objects.get(key)
        return known is not None and known.version is not None and str(known.version) == version

    def keys_of(self, kind: str) -> list[ObjectKey]:
        return sorted(key for key in self.objects if key[0] == kind)

    def tick_pools(self) -> list[str]:
        return sorted(self.pools) or [DEFAULT_POOL]
