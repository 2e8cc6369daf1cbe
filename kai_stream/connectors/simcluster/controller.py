"""The simulated workload controller: evicted pods that a controller would restart come back pending, as a
Job/StatefulSet/LeaderWorkerSet controller re-creates them in a real cluster.

Which pods (the same rule as ``kai_stream.emulation.recreated_after_eviction``):

* a pod labelled ``kai.scheduler/recreate-on-evict: "true"``, re-created on its own (``recreates``);
* a pod whose re-creation a caller asks for (``recreate``): ``simulate --live`` does so for the pods a
  consolidation moved, standing in for their controllers. A pod labelled ``"false"`` never comes back.

The replacement (``replacement``) keeps name, namespace, labels, annotations (less the placement's
``kai.scheduler/gpu-indices``), owner references, spec (less ``nodeName``) and creation time; it gets uid
``recreated_uid(old uid)``, no status, and is created right after the evicted pod is gone (immediately, or
when its kubelet finishes a graceful deletion).
"""

from __future__ import annotations

from typing import Any

from kai_stream.connectors.simcluster import resources
from kai_stream.connectors.simcluster.store import DELETED, Change, Obj, Store, clone
from kai_stream.emulation import LABEL_RECREATE, recreated_uid

ANNOTATION_GPU_INDICES = "kai.scheduler/gpu-indices"

_PODS = resources.by_key("pods")


def _flag(meta: dict[str, Any]) -> str:
    labels = meta.get("labels") or {}
    return str(labels.get(LABEL_RECREATE, "")).strip().lower()


def recreates(meta: dict[str, Any]) -> bool:
    """Whether an evicted pod with this metadata is re-created on its own (see module doc)."""
    return _flag(meta) == "true"


def replacement(pod: Obj) -> Obj:
    """The pending pod a controller creates in place of the evicted ``pod``."""
    meta = pod["metadata"]
    keep = ("name", "namespace", "labels", "annotations", "ownerReferences", "creationTimestamp")
    new_meta = {k: clone(meta[k]) if isinstance(meta[k], dict | list) else meta[k] for k in keep if k in meta}
    new_meta["uid"] = recreated_uid(str(meta.get("uid", "")))
    annotations = dict(new_meta.get("annotations") or {})
    annotations.pop(ANNOTATION_GPU_INDICES, None)
    new_meta["annotations"] = annotations
    spec = clone(pod.get("spec") or {})
    spec.pop("nodeName", None)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": new_meta, "spec": spec}


class WorkloadController:
    """Re-creates evicted pods (after the evicted one is deleted from the store); see module doc."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._evicted: dict[str, Obj] = {}
        self._wanted: set[str] = set()
        store.add_listener(self._on_change)

    def evicted(self, pod: Obj) -> None:
        """Called by the eviction subresource before it deletes ``pod``."""
        uid = str(pod["metadata"].get("uid", ""))
        self._evicted[uid] = clone(pod)
        if recreates(pod.get("metadata") or {}):
            self._wanted.add(uid)

    def recreate(self, uid: str) -> Obj | None:
        """Re-create the evicted pod ``uid`` now if it is gone (else once it is); its replacement, if made."""
        pod = self._evicted.get(uid)
        if pod is None or _flag(pod.get("metadata") or {}) == "false":
            return None
        self._wanted.add(uid)
        meta = pod["metadata"]
        current = self.store.find(_PODS, meta.get("namespace", ""), meta["name"])
        if current is not None and current["metadata"].get("uid") == uid:
            return None
        return self._replace(uid)

    def _replace(self, uid: str) -> Obj | None:
        self._wanted.discard(uid)
        pod = self._evicted.pop(uid, None)
        if pod is None:
            return None
        new = replacement(pod)
        if self.store.exists(_PODS, new["metadata"].get("namespace", ""), new["metadata"]["name"]):
            return None
        return self.store.create(_PODS, new, keep_metadata=True)

    def _on_change(self, change: Change, obj: Obj, old: Obj | None) -> None:
        if change.resource.key != "pods" or change.type != DELETED:
            return
        uid = str(obj["metadata"].get("uid", ""))
        if uid in self._wanted:
            self._replace(uid)
