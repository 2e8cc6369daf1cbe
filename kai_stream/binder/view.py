"""The binder's watched view of the nodes and of the pods bound to them, and its reservations for binds in flight.

``RoomView.run`` lists and then watches nodes and pods
(``kai_stream.connectors.kubernetes.watcher``; a 410 or a broken watch
re-lists, dropping what vanished), keeping each node's allocatable and the pods on it parsed once per change, so a
bind's room check (``room.room_verdict``) costs no API call. ``reserve`` checks a bind against that view *and*
against the binds this binder has checked but the watch does not show yet, and, when it fits, counts the pod on
its node at once (no await between the check and the count: two binds in flight onto one GPU cannot both pass).
A reservation ends when the watch shows the pod (bound, or deleted) or when its binding POST fails (``release``).

A list's pods are filed by node unparsed and parsed the first time a bind onto their node is checked (or when the
watch changes them), so the view is ready once the list has arrived, whatever the cluster's size: the check of a
node still counts every pod the list put on it, parsed as the watch's are.

The view lags the API by a watch event: a pod another scheduler bound a moment ago may be missing from it (as in
KAI's and kube-scheduler's informer caches); pods leaving stay in it until their deletion is seen, which only ever
refuses more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kubernetes_asyncio import client

from kai_stream.binder.room import claimed, node_allocatable, pod_spec, room_verdict
from kai_stream.connectors.kubernetes.kinds import KIND_BY_NAME, WatchedKind
from kai_stream.connectors.kubernetes.watcher import Obj, follow, list_objects
from kai_stream.core.events import BindRequested, PodSpec, Resources

log = logging.getLogger(__name__)

_WATCH_TIMEOUT_S = 300


class RoomView:
    """Nodes and bound pods by list + watch, plus this binder's reservations (see the module docstring)."""

    def __init__(self, api: client.ApiClient, *, watch_timeout_s: int = _WATCH_TIMEOUT_S) -> None:
        self.api = api
        self.watch_timeout_s = watch_timeout_s
        self.nodes: dict[str, tuple[Resources, int]] = {}
        self.pods: dict[str, PodSpec] = {}
        self.on_node: dict[str, dict[str, PodSpec]] = {}
        self.reserved: dict[str, PodSpec] = {}
        self._unparsed: dict[str, dict[str, Obj]] = {}
        """Listed pods by node name and uid, not parsed yet (``_parse_listed``)."""
        self._unparsed_node: dict[str, str] = {}
        self._synced = {kind: asyncio.Event() for kind in ("Node", "Pod")}

    async def ready(self) -> None:
        """Until nodes and pods have been listed once."""
        for event in self._synced.values():
            await event.wait()

    async def run(self) -> None:
        """List and watch nodes and pods until cancelled."""
        await asyncio.gather(self._follow(KIND_BY_NAME["Node"], self._node_changed, self._nodes_listed),
                             self._follow(KIND_BY_NAME["Pod"], self._pod_changed, self._pods_listed))

    # ------------------------------------------------------------------ bind checks

    def reserve(self, decision: BindRequested, own: Obj | None = None) -> str | None:
        """Why the bind must not go ahead by this view (``room.room_verdict``), or None, and then the pod counts
        on the node until the watch shows it or ``release``."""
        node = self.nodes.get(decision.node)
        if node is None:
            return f"node {decision.node} not found"
        self._parse_listed(decision.node)
        allocatable, gpu_memory_mib = node
        counted = dict(self.on_node.get(decision.node, {}))
        for uid, pod in self.reserved.items():
            if pod.node_name == decision.node and uid not in counted:
                counted[uid] = pod
        own_pod = pod_spec(own) if own is not None else None
        refused = room_verdict(decision, allocatable, gpu_memory_mib, counted.values(), own_pod)
        if refused is None:
            self.reserved[decision.uid] = claimed(decision, own_pod, gpu_memory_mib)
        return refused

    def release(self, uid: str) -> None:
        """The bind of ``uid`` did not happen: it no longer counts."""
        self.reserved.pop(uid, None)

    # ------------------------------------------------------------------ folding the watch

    def _node_changed(self, change: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        parsed = None if change == "DELETED" else node_allocatable(obj)
        if parsed is None:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = parsed

    def _parse_listed(self, node: str) -> None:
        for obj in self._unparsed.pop(node, {}).values():
            self._pod_changed("ADDED", obj)

    def _pod_changed(self, change: str, obj: Obj) -> None:
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        listed_on = self._unparsed_node.pop(uid, None)
        if listed_on is not None:
            self._unparsed.get(listed_on, {}).pop(uid, None)
        bound = bool((obj.get("spec") or {}).get("nodeName"))
        spec = None if change == "DELETED" or not bound else pod_spec(obj)
        old = self.pods.pop(uid, None)
        if old is not None and old.node_name is not None:
            self.on_node.get(old.node_name, {}).pop(uid, None)
        if change == "DELETED" or (spec is not None and spec.node_name is not None):
            self.reserved.pop(uid, None)
        if spec is not None and spec.node_name is not None:
            self.pods[uid] = spec
            self.on_node.setdefault(spec.node_name, {})[uid] = spec

    def _nodes_listed(self, items: list[Obj]) -> None:
        self.nodes.clear()
        for obj in items:
            self._node_changed("ADDED", obj)

    def _pods_listed(self, items: list[Obj]) -> None:
        self.pods.clear()
        self.on_node.clear()
        self._unparsed.clear()
        self._unparsed_node.clear()
        for obj in items:
            uid = str((obj.get("metadata") or {}).get("uid", ""))
            node = (obj.get("spec") or {}).get("nodeName")
            if node:
                self._unparsed.setdefault(str(node), {})[uid] = obj
                self._unparsed_node[uid] = str(node)

    async def _follow(
        self, kind: WatchedKind, changed: Callable[[str, Obj], None], listed: Callable[[list[Obj]], None]
    ) -> None:
        call = kind.list_call(self.api)

        async def relist() -> str:
            items, version = await list_objects(kind, call)
            listed(items)
            self._synced[kind.kind].set()
            return version

        async def apply(change: str, obj: Obj, version: str) -> None:
            changed(change, obj)

        await follow(kind, call, relist=relist, changed=apply, timeout_s=self.watch_timeout_s, who="binder view")

