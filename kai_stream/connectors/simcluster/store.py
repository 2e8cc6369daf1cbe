"""The object store of the simulated apiserver: objects by kind, one global resourceVersion, a bounded
history of changes (the "etcd window" a watch can resume from), and push fan-out to watchers.

Each object is kept as its latest `Change`: the serialized JSON plus a flat selector view, so neither the
live objects nor the history are nested containers the garbage collector has to walk (what walking them
cost: benchmarks/README.md). Reads parse a fresh copy.
Everything here is synchronous; the HTTP layer awaits only on sockets. Kind-specific rules (defaults,
immutable fields) live in `rules.py`.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from kai_stream.connectors.simcluster import rules, selectors
from kai_stream.connectors.simcluster.errors import ApiError, already_exists, conflict, not_found
from kai_stream.connectors.simcluster.names import validate_name
from kai_stream.connectors.simcluster.resources import ResourceType, by_key
from kai_stream.connectors.simcluster.selectors import Selector

INDEXED = {"pods": selectors.FIELD + "spec.nodeName"}
"""Field indexes by store key, as kube-apiserver's watch cache keeps for pods by node: a list or watch that selects
``spec.nodeName=<node>`` looks at that node's pods, not at every pod (the binder lists a node's pods per bind)."""

Obj = dict[str, Any]
Listener = Callable[["Change", Obj, "Obj | None"], None]
"""Called synchronously on every commit with the change, the stored object and the version it replaced."""

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"


def clone(obj: Obj) -> Obj:
    result: Obj = orjson.loads(orjson.dumps(obj))
    return result


@functools.lru_cache(maxsize=4)
def _second(epoch_second: int) -> str:
    return datetime.fromtimestamp(epoch_second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339(moment: datetime) -> str:
    return _second(int(moment.timestamp()))


def _ns_name(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


class Change:
    """One committed write as the history keeps it: the serialized object and flat selector views of the
    new and previous versions. Nothing here is a nested container, so a long history costs the garbage
    collector nothing."""

    __slots__ = ("data", "namespace", "old_data", "old_view", "resource", "rv", "type", "view")

    def __init__(
        self,
        rv: int,
        type_: str,
        resource: ResourceType,
        obj: Obj,
        old: Obj | None,
        *,
        keep_old: bool = False,
        old_view: dict[str, str] | None = None,
    ) -> None:
        self.rv = rv
        self.type = type_
        self.resource = resource
        self.namespace: str = (obj.get("metadata") or {}).get("namespace") or ""
        self.data = orjson.dumps(obj)
        self.view = selectors.view(obj, resource.field_labels)
        if old_view is None and old is not None:
            old_view = selectors.view(old, resource.field_labels)
        self.old_view = old_view
        self.old_data: bytes | None = None
        if keep_old and old is not None:
            meta = {**old.get("metadata", {}), "resourceVersion": str(rv)}
            self.old_data = orjson.dumps({**old, "metadata": meta})

    def line(self, type_: str | None = None, *, previous: bool = False) -> bytes:
        """The NDJSON watch line for this change, optionally re-typed and carrying the previous version (a
        filtered watch reports an object leaving its selector as DELETED with the old content and the new
        resourceVersion, as the apiserver's watch cache does)."""
        data = self.old_data if previous and self.old_data is not None else self.data
        return b'{"type":"' + (type_ or self.type).encode() + b'","object":' + data + b"}\n"

    def retyped(self, type_: str) -> Change:
        copy = Change.__new__(Change)
        for slot in Change.__slots__:
            setattr(copy, slot, getattr(self, slot))
        copy.type = type_
        return copy

    def object(self) -> Obj:
        result: Obj = orjson.loads(self.data)
        return result


class Watcher:
    """A watch stream's inbox: the store appends matching changes, the HTTP side drains them in batches."""

    def __init__(self, resource: ResourceType, namespace: str | None, selector: Selector) -> None:
        self.resource = resource
        self.namespace = namespace
        self.selector = selector
        self.pending: deque[Change] = deque()
        self.ready = asyncio.Event()

    def push(self, change: Change) -> None:
        self.pending.append(change)
        self.ready.set()

    def render(self, change: Change) -> bytes | None:
        """The line this watcher sends for a change, or None; objects moving across the selector become
        ADDED/DELETED, as the apiserver does for filtered watches."""
        if self.namespace is not None and change.namespace != self.namespace:
            return None
        if self.selector.empty:
            return change.line()
        now = self.selector.matches(change.view)
        if change.type != MODIFIED:
            return change.line() if now else None
        before = change.old_view is not None and self.selector.matches(change.old_view)
        if now and before:
            return change.line()
        if now:
            return change.line(ADDED)
        if before:
            return change.line(DELETED, previous=True)
        return None

    def drain(self) -> list[Change]:
        items = list(self.pending)
        self.pending.clear()
        self.ready.clear()
        return items


class Store:
    def __init__(self, *, history_limit: int = 100_000, clock: Callable[[], datetime] | None = None) -> None:
        self._rv = 0
        self._objects: dict[str, dict[tuple[str, str], Change]] = {}
        self._index: dict[str, dict[str, set[tuple[str, str]]]] = {key: {} for key in INDEXED}
        self._history: deque[Change] = deque()
        self._history_limit = history_limit
        self._compacted_rv = 0
        self._watchers: dict[str, set[Watcher]] = {}
        self._listeners: list[Listener] = []
        self._clock = clock or (lambda: datetime.now(UTC))
        for namespace in ("default", "kube-system", "kube-public"):
            self._ensure_namespace(namespace)

    # -- bookkeeping -----------------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def compacted_rv(self) -> int:
        """Watches must start at or after this version; older ones get 410 Expired."""
        return self._compacted_rv

    def now(self) -> datetime:
        return self._clock()

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def compact(self) -> None:
        """Forget the whole change history, as an etcd compaction would."""
        self._history.clear()
        self._compacted_rv = self._rv

    def _commit(self, type_: str, rt: ResourceType, obj: Obj, old: Obj | None) -> Change:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        keep_old = type_ == MODIFIED and any(not w.selector.empty for w in self._watchers.get(rt.key, ()))
        bucket = self._objects.setdefault(rt.key, {})
        previous = bucket.get(_ns_name(obj)) if old is not None else None
        change = Change(self._rv, type_, rt, obj, old, keep_old=keep_old,
                        old_view=None if previous is None else previous.view)
        stored = bucket.get(_ns_name(obj))
        if type_ == DELETED:
            bucket.pop(_ns_name(obj), None)
        else:
            bucket[_ns_name(obj)] = change
        self._reindex(rt, _ns_name(obj), stored, None if type_ == DELETED else change)
        if self._history_limit > 0:
            self._history.append(change)
            while len(self._history) > self._history_limit:
                self._compacted_rv = self._history.popleft().rv
        else:
            self._compacted_rv = self._rv
        for watcher in self._watchers.get(rt.key, ()):
            watcher.push(change)
        for listener in self._listeners:
            listener(change, obj, old)
        return change

    # -- reads -----------------------------------------------------------------------------------------
    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        """A fresh copy of the stored object (callers may change it freely); 404 ApiError if absent."""
        obj = self.find(rt, namespace, name)
        if obj is None:
            raise not_found(rt.plural, name, rt.group)
        return obj

    def find(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        stored = self._objects.get(rt.key, {}).get((namespace if rt.namespaced else "", name))
        return None if stored is None else stored.object()

    def exists(self, rt: ResourceType, namespace: str, name: str) -> bool:
        return (namespace if rt.namespaced else "", name) in self._objects.get(rt.key, {})

    def _reindex(self, rt: ResourceType, key: tuple[str, str], old: Change | None, new: Change | None) -> None:
        field = INDEXED.get(rt.key)
        if field is None:
            return
        index = self._index[rt.key]
        if old is not None:
            members = index.get(old.view.get(field, ""))
            if members is not None:
                members.discard(key)
                if not members:
                    del index[old.view.get(field, "")]
        if new is not None:
            index.setdefault(new.view.get(field, ""), set()).add(key)

    def _select(self, rt: ResourceType, namespace: str | None, selector: Selector) -> list[Change]:
        bucket = self._objects.get(rt.key, {})
        field = INDEXED.get(rt.key)
        wanted = selector.required(field) if field is not None else None
        keys = bucket if wanted is None else self._index[rt.key].get(wanted, ())
        return [
            bucket[k]
            for k in sorted(keys)
            if (namespace is None or k[0] == namespace) and (selector.empty or selector.matches(bucket[k].view))
        ]

    def list_objects(self, rt: ResourceType, namespace: str | None, selector: Selector) -> tuple[list[Obj], int]:
        return [c.object() for c in self._select(rt, namespace, selector)], self._rv

    def list_raw(self, rt: ResourceType, namespace: str | None, selector: Selector) -> tuple[list[bytes], int]:
        """Serialized items sorted by namespace/name, and the resourceVersion of the snapshot."""
        return [c.data for c in self._select(rt, namespace, selector)], self._rv

    def count(self, rt: ResourceType) -> int:
        return len(self._objects.get(rt.key, {}))

    def objects(self, rt: ResourceType, selector: Selector | None = None) -> list[Obj]:
        return self.list_objects(rt, None, selector or Selector())[0]

    # -- watches ---------------------------------------------------------------------------------------
    def watch(
        self, rt: ResourceType, namespace: str | None, selector: Selector, since: int | None
    ) -> Watcher:
        """Register a watcher. `since=None` replays the current objects as ADDED (like resourceVersion ""
        or "0"); otherwise every change after `since`, or 410 if that part of the history is gone."""
        watcher = Watcher(rt, namespace, selector)
        if since is None:
            for stored in self._select(rt, namespace, selector):
                watcher.push(stored.retyped(ADDED))
        else:
            if since < self._compacted_rv:
                raise ApiError(
                    410, f"too old resource version: {since} ({self._compacted_rv})", reason="Expired"
                )
            for change in self._history:
                if change.rv > since and change.resource.key == rt.key:
                    watcher.push(change)
        self._watchers.setdefault(rt.key, set()).add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.get(watcher.resource.key, set()).discard(watcher)

    def wake_watchers(self) -> None:
        for watchers in self._watchers.values():
            for watcher in watchers:
                watcher.ready.set()

    def watcher_count(self) -> int:
        return sum(len(ws) for ws in self._watchers.values())

    # -- writes ----------------------------------------------------------------------------------------
    def create(self, rt: ResourceType, obj: Obj, *, keep_metadata: bool = False) -> Obj:
        """Store a new object; assigns uid, creationTimestamp and resourceVersion (a scenario load may keep
        its own uid and creationTimestamp)."""
        obj = clone(obj)
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            else:
                raise ApiError(422, f"{rt.kind}.{rt.api_version} is invalid: metadata.name: Required value")
        validate_name(rt.kind, str(meta["name"]), label=rt.plural == "namespaces")
        if rt.namespaced:
            meta["namespace"] = meta.get("namespace") or "default"
            validate_name(rt.kind, str(meta["namespace"]), label=True, field="metadata.namespace")
            self._ensure_namespace(meta["namespace"])
        else:
            meta.pop("namespace", None)
        if self.exists(rt, meta.get("namespace", ""), meta["name"]):
            raise already_exists(rt.plural, meta["name"], rt.group)
        if not (keep_metadata and meta.get("uid")):
            meta["uid"] = str(uuid.uuid4())
        if not (keep_metadata and meta.get("creationTimestamp")):
            meta["creationTimestamp"] = rfc3339(self.now())
        meta.pop("deletionTimestamp", None)
        meta.setdefault("generation", 1)
        rules.prepare_create(rt, obj, loaded=keep_metadata)
        if rt.key == "pods":
            self._admit_priority(obj["spec"])
        self._commit(ADDED, rt, obj, None)
        return obj

    def _admit_priority(self, spec: Obj) -> None:
        """kube-apiserver's Priority admission where the store holds the pod's PriorityClass: its value becomes
        ``spec.priority`` (and its ``preemptionPolicy``). Lenient otherwise, unlike kube-apiserver: a class the
        store lacks is accepted (there: 403) and a pod without a class gets no priority (there: 0, or the global
        default class's value); the scheduler's built-in classes stand in for both."""
        name = spec.get("priorityClassName")
        found = self.find(by_key("priorityclasses.scheduling.k8s.io"), "", str(name)) if name else None
        if found is not None and "priority" not in spec:
            spec["priority"] = int(found.get("value", 0))
            spec.setdefault("preemptionPolicy", found.get("preemptionPolicy", "PreemptLowerPriority"))

    def _ensure_namespace(self, namespace: str) -> None:
        ns_type = by_key("namespaces")
        if not self.exists(ns_type, "", namespace):
            self.create(ns_type, {"metadata": {"name": namespace}})

    def replace(
        self, rt: ResourceType, namespace: str, name: str, new: Obj, *, subresource: str = ""
    ) -> Obj:
        """PUT semantics: optimistic concurrency on metadata.resourceVersion, identity fields kept,
        status and spec split by the `/status` subresource."""
        old = self.get(rt, namespace, name)
        new = clone(new)
        meta = new.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise ApiError(
                400, f'the name of the object ({meta.get("name")}) does not match the name on the URL ({name})'
            )
        expected = meta.get("resourceVersion")
        if expected and expected != old["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, name, "the object has been modified; please apply your changes to the latest "
                           "version and try again", rt.group)
        return self._write(rt, old, new, subresource)

    def mutate(
        self, rt: ResourceType, namespace: str, name: str, change: Callable[[Obj], Obj], *, subresource: str = ""
    ) -> Obj:
        """Read-modify-write with the same rules as `replace` (used by patches, kubelets and bindings)."""
        old = self.get(rt, namespace, name)
        new = change(clone(old))
        meta = new.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise ApiError(422, "metadata.name is immutable")
        if meta.get("resourceVersion", old["metadata"]["resourceVersion"]) != old["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, name, "the object has been modified; please apply your changes to the latest "
                           "version and try again", rt.group)
        return self._write(rt, old, new, subresource)

    def _write(self, rt: ResourceType, old: Obj, new: Obj, subresource: str) -> Obj:
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        meta = new.setdefault("metadata", {})
        old_meta = old["metadata"]
        meta["name"] = old_meta["name"]
        if rt.namespaced:
            meta["namespace"] = old_meta["namespace"]
        for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta.setdefault("generation", old_meta.get("generation", 1))
        meta["resourceVersion"] = old_meta["resourceVersion"]
        new = rules.prepare_update(rt, old, new, subresource)
        if new == old:
            return old
        self._commit(MODIFIED, rt, new, old)
        return new

    def delete(self, rt: ResourceType, namespace: str, name: str, *, grace_seconds: float = 0.0,
               preconditions: dict[str, Any] | None = None) -> Obj:
        """Delete now, or (for a pod on a node, grace > 0) mark it with deletionTimestamp and let its
        kubelet finish the deletion."""
        old = self.get(rt, namespace, name)
        if preconditions:
            for field in ("uid", "resourceVersion"):
                want = preconditions.get(field)
                if want and want != old["metadata"].get(field):
                    raise conflict(rt.plural, name, f"Precondition failed: {field} in precondition: {want}, "
                                   f"{field} in object meta: {old['metadata'].get(field)}", rt.group)
        if grace_seconds > 0 and rules.graceful(rt, old):
            if old["metadata"].get("deletionTimestamp"):
                return old
            new = clone(old)
            new["metadata"]["deletionTimestamp"] = rfc3339(self.now())
            new["metadata"]["deletionGracePeriodSeconds"] = int(grace_seconds)
            self._commit(MODIFIED, rt, new, old)
            return new
        final = clone(old)
        self._commit(DELETED, rt, final, old)
        return final
