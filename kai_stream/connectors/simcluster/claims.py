"""The simulated resourceclaim controller's release half: when a pod is gone, its ResourceClaims let it go, as
kube-controller-manager's resourceclaim controller (and the garbage collector) do in a real cluster.

* A claim the pod owns (made from a template for it, ``ownerReferences``) is deleted.
* A claim reserved for it loses that ``status.reservedFor`` entry; with no consumer left its ``status.allocation``
  is removed, so its devices are free again for the next pod that names it.
"""

from __future__ import annotations

from kai_stream.connectors.simcluster import resources
from kai_stream.connectors.simcluster.selectors import Selector
from kai_stream.connectors.simcluster.store import DELETED, Change, Obj, Store

_CLAIMS = resources.resolve("resourceclaims")


class ClaimReleaser:
    """Releases a deleted pod's ResourceClaims (see module doc)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.add_listener(self._on_change)

    def _on_change(self, change: Change, obj: Obj, old: Obj | None) -> None:
        if change.resource.key != "pods" or change.type != DELETED:
            return
        meta = obj.get("metadata") or {}
        uid, namespace = meta.get("uid"), str(meta.get("namespace") or "default")
        claims, _ = self.store.list_objects(_CLAIMS, namespace, Selector())
        for claim in claims:
            name = claim["metadata"]["name"]
            if any(o.get("uid") == uid for o in claim["metadata"].get("ownerReferences") or []):
                self.store.delete(_CLAIMS, namespace, name)
            elif any(r.get("uid") == uid for r in (claim.get("status") or {}).get("reservedFor") or []):
                self.store.mutate(_CLAIMS, namespace, name, lambda c: _released(c, uid), subresource="status")


def _released(claim: Obj, uid: object) -> Obj:
    status = dict(claim.get("status") or {})
    reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != uid]
    if reserved:
        status["reservedFor"] = reserved
    else:
        status.pop("reservedFor", None)
        status.pop("allocation", None)
    claim["status"] = status
    return claim
