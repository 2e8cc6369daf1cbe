"""Simulated kubelets: they turn bound pods Running, finish pods that carry a duration annotation, and
complete graceful deletions. Driven by store changes (push, no polling) and the event loop's timers.

Time: `start_delay` is wall-clock seconds from binding to Running; pod durations
(`kai.scheduler/duration-seconds`) and grace periods are simulated seconds, multiplied by `time_scale`
(wall seconds per simulated second; 0.01 plays a 60 s job in 0.6 s). With `enforce_capacity`, a pod that
does not fit next to the node's running pods is rejected (Failed, `OutOf<resource>`; see admission.py).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable
from typing import Any

from kai_stream.connectors.simcluster import admission
from kai_stream.connectors.simcluster.resources import by_key
from kai_stream.connectors.simcluster.rules import INTERNAL, TERMINAL_PHASES
from kai_stream.connectors.simcluster.selectors import parse as parse_selector
from kai_stream.connectors.simcluster.store import ADDED, DELETED, Change, Obj, Store, rfc3339

DURATION_ANNOTATION = "kai.scheduler/duration-seconds"
_PODS = by_key("pods")
_NODES = by_key("nodes")


def _ip(seed: str) -> str:
    digest = hashlib.sha1(seed.encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.{max(1, digest[2] % 255)}"


def _condition(type_: str, status: str, at: str, reason: str = "") -> dict[str, Any]:
    cond: dict[str, Any] = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": at}
    if reason:
        cond["reason"] = reason
    return cond


def running_status(pod: Obj, at: str) -> dict[str, Any]:
    """The status of a started pod; the claims the resourceclaim controller named stay (a kubelet never sets them)."""
    spec = pod.get("spec", {})
    old = pod.get("status", {})
    node = spec.get("nodeName", "")
    kept = {"resourceClaimStatuses": old["resourceClaimStatuses"]} if old.get("resourceClaimStatuses") else {}
    return {
        **kept,
        "phase": "Running",
        "conditions": [
            _condition("PodScheduled", "True", at),
            _condition("Initialized", "True", at),
            _condition("ContainersReady", "True", at),
            _condition("Ready", "True", at),
        ],
        "startTime": at,
        "hostIP": _ip(node),
        "podIP": _ip(pod["metadata"].get("uid", pod["metadata"]["name"])),
        "qosClass": old.get("qosClass", "BestEffort"),
        "containerStatuses": [
            {
                "name": c.get("name", ""),
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"sim://{pod['metadata'].get('uid', '')}/{c.get('name', '')}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": at}},
            }
            for c in spec.get("containers", [])
        ],
    }


def succeeded_status(pod: Obj, at: str) -> dict[str, Any]:
    status = dict(pod.get("status", {}))
    started = status.get("startTime", at)
    status["phase"] = "Succeeded"
    status["conditions"] = [
        _condition("PodScheduled", "True", started),
        _condition("Initialized", "True", started),
        _condition("ContainersReady", "False", at, "PodCompleted"),
        _condition("Ready", "False", at, "PodCompleted"),
    ]
    status["containerStatuses"] = [
        {
            **cs,
            "ready": False,
            "started": False,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": at}},
        }
        for cs in status.get("containerStatuses", [])
    ]
    return status


def duration_of(pod: Obj) -> float | None:
    raw = (pod.get("metadata", {}).get("annotations") or {}).get(DURATION_ANNOTATION)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


class SimKubelets:
    """All simulated kubelets of the cluster, one timer per pending transition."""

    def __init__(
        self,
        store: Store,
        *,
        time_scale: float = 1.0,
        start_delay: float = 0.01,
        termination_grace: float | None = 0.0,
        enforce_capacity: bool = False,
    ) -> None:
        self.store = store
        self.enforce_capacity = enforce_capacity
        self.time_scale = time_scale
        self.start_delay = start_delay
        self.termination_grace = termination_grace
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        store.add_listener(self._on_change)

    def activate(self) -> None:
        """Start acting (called from the running loop); picks up pods already in the store."""
        self._loop = asyncio.get_running_loop()
        for pod in self.store.objects(_PODS):
            self._consider(pod)

    def deactivate(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._loop = None

    def _on_change(self, change: Change, obj: Obj, old: Obj | None) -> None:
        if self._loop is None:
            return
        if change.resource.key == "nodes" and change.type == ADDED:
            on_node = parse_selector(None, f"spec.nodeName={obj['metadata']['name']}", _PODS.field_labels)
            for pod in self.store.objects(_PODS, on_node):
                self._consider(pod)
            return
        if change.resource.key != "pods":
            return
        if change.type == DELETED:
            uid = obj["metadata"].get("uid", "")
            for stage in ("start", "finish", "delete"):
                handle = self._timers.pop((uid, stage), None)
                if handle is not None:
                    handle.cancel()
            return
        self._consider(obj)

    def _consider(self, pod: Obj) -> None:
        meta = pod["metadata"]
        node = pod.get("spec", {}).get("nodeName")
        phase = pod.get("status", {}).get("phase")
        if meta.get("deletionTimestamp"):
            grace = self.termination_grace
            if grace is None:
                grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            self._schedule(pod, "delete", grace * self.time_scale)
            return
        if not node or not self.store.exists(_NODES, "", node):
            return
        if phase == "Pending":
            self._schedule(pod, "start", self.start_delay)
        elif phase == "Running":
            duration = duration_of(pod)
            if duration is not None:
                self._schedule(pod, "finish", duration * self.time_scale)
        elif phase in TERMINAL_PHASES:
            return

    def finish_deletions(self, uids: Iterable[str]) -> int:
        """End the grace period of these terminating pods now (a clock jump: ``simulate --live`` plays the
        grace period in rounds); returns how many were removed."""
        wanted = set(uids)
        refs = sorted(
            (pod["metadata"].get("namespace", ""), pod["metadata"]["name"], pod["metadata"].get("uid", ""))
            for pod in self.store.objects(_PODS)
            if pod["metadata"].get("uid") in wanted and pod["metadata"].get("deletionTimestamp")
        )
        for ref in refs:
            handle = self._timers.pop((ref[2], "delete"), None)
            if handle is not None:
                handle.cancel()
            self._fire("delete", ref)
        return len(refs)

    def _admit(self, pod: Obj, now: str) -> dict[str, Any]:
        if self.enforce_capacity:
            node_name = pod["spec"]["nodeName"]
            node = self.store.find(_NODES, "", node_name)
            on_node = parse_selector(None, f"spec.nodeName={node_name},status.phase=Running", _PODS.field_labels)
            if node is not None:
                resource = admission.rejection(pod, node, self.store.objects(_PODS, on_node))
                if resource is not None:
                    return admission.rejected_status(pod, resource, node, now)
        return running_status(pod, now)

    def _schedule(self, pod: Obj, stage: str, delay: float) -> None:
        assert self._loop is not None
        meta = pod["metadata"]
        key = (meta.get("uid", ""), stage)
        if key in self._timers:
            return
        ref = (meta.get("namespace", ""), meta["name"], key[0])
        self._timers[key] = self._loop.call_later(max(0.0, delay), self._fire, stage, ref)

    def _fire(self, stage: str, ref: tuple[str, str, str]) -> None:
        namespace, name, uid = ref
        self._timers.pop((uid, stage), None)
        pod = self.store.find(_PODS, namespace, name)
        if pod is None or pod["metadata"].get("uid") != uid:
            return
        now = rfc3339(self.store.now())
        phase = pod.get("status", {}).get("phase")
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        if stage == "delete":
            self.store.delete(_PODS, namespace, name)
        elif stage == "start" and phase == "Pending" and not deleting:
            status = self._admit(pod, now)
            self.store.mutate(_PODS, namespace, name, lambda p: {**p, "status": status}, subresource=INTERNAL)
        elif stage == "finish" and phase == "Running" and not deleting:
            self.store.mutate(_PODS, namespace, name, lambda p: {**p, "status": succeeded_status(p, now)},
                              subresource=INTERNAL)
