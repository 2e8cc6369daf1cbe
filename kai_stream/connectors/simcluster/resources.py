"""The kinds the simulated apiserver serves: group, version, plural, scope, subresources, field labels.

Also builds the discovery documents (`/api`, `/apis`, `APIResourceList`) from the same table, so the
registry is the one place that says what exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_META_FIELDS = ("metadata.name", "metadata.namespace")
_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ()
    field_labels: tuple[str, ...] = _META_FIELDS
    short_names: tuple[str, ...] = ()
    builtin: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Store key: `plural` for the core group, `plural.group` otherwise (as kubectl names them)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        ("status", "binding", "eviction"),
        (
            *_META_FIELDS,
            "spec.nodeName",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.restartPolicy",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
        ("po",),
    ),
    ResourceType("", "v1", "nodes", "Node", False, ("status",), (*_META_FIELDS, "spec.unschedulable"), ("no",)),
    ResourceType("", "v1", "namespaces", "Namespace", False, ("status",), (*_META_FIELDS, "status.phase"), ("ns",)),
    ResourceType(
        "",
        "v1",
        "events",
        "Event",
        True,
        (),
        (
            *_META_FIELDS,
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "reason",
            "type",
        ),
        ("ev",),
    ),
    ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, (), _META_FIELDS, ("pc",)),
    ResourceType("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
    ResourceType("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, ("status",)),
    ResourceType("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    ResourceType(
        "resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False, (),
        (*_META_FIELDS, "spec.nodeName", "spec.driver"),
    ),
    ResourceType("scheduling.run.ai", "v2", "queues", "Queue", False, ("status",), _META_FIELDS, (), False),
    ResourceType(
        "scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", True, ("status",), _META_FIELDS, ("pg",), False
    ),
    ResourceType("kai.scheduler", "v1alpha1", "topologies", "Topology", False, (), _META_FIELDS, (), False),
)

_BY_PATH: dict[tuple[str, str, str], ResourceType] = {(r.group, r.version, r.plural): r for r in RESOURCES}
_BY_KIND: dict[tuple[str, str], ResourceType] = {(r.api_version, r.kind): r for r in RESOURCES}
_BY_KEY: dict[str, ResourceType] = {r.key: r for r in RESOURCES}
GROUPS: tuple[str, ...] = tuple(sorted({r.group for r in RESOURCES if r.group}))


def by_path(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_PATH.get((group, version, plural))


def by_kind(api_version: str, kind: str) -> ResourceType | None:
    return _BY_KIND.get((api_version, kind))


def by_key(key: str) -> ResourceType:
    return _BY_KEY[key]


def resolve(ref: str) -> ResourceType:
    """Find a type by `plural`, `plural.group`, `Kind` or short name (test helpers use this)."""
    if ref in _BY_KEY:
        return _BY_KEY[ref]
    for r in RESOURCES:
        if ref in (r.plural, r.kind, r.singular) or ref in r.short_names:
            return r
    raise KeyError(f"unknown resource {ref!r}; known: {sorted(_BY_KEY)}")


def versions_of(group: str) -> list[str]:
    return sorted({r.version for r in RESOURCES if r.group == group})


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group_doc(group: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions_of(group)]
    return {"name": group, "versions": versions, "preferredVersion": versions[-1]}


def api_group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group_doc(g) for g in GROUPS]}


def api_group(group: str) -> dict[str, Any] | None:
    if group not in GROUPS:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group)}


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    members = [r for r in RESOURCES if r.group == group and r.version == version]
    if not members:
        return None
    items: list[dict[str, Any]] = []
    for r in members:
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(_VERBS),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        items.append(entry)
        for sub in r.subresources:
            verbs = ["create"] if sub in ("binding", "eviction") else ["get", "patch", "update"]
            sub_kind = {"binding": "Binding", "eviction": "Eviction"}.get(sub, r.kind)
            items.append({"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                          "kind": sub_kind, "verbs": verbs})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": members[0].api_version, "resources": items}
