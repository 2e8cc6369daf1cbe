"""Scenario files: multi-document YAML of real Kubernetes manifests (Nodes, Queues, PodGroups, Pods,
PriorityClasses, Topology, Namespaces; `kind: List` is unpacked). Load order puts nodes before pods, and a
pod that already names its node arrives Running, as if its kubelet had started it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from kai_stream.connectors.simcluster.kubelet import running_status
from kai_stream.connectors.simcluster.resources import ResourceType, by_kind
from kai_stream.connectors.simcluster.store import Obj, Store, rfc3339

_ORDER = ("namespaces", "priorityclasses.scheduling.k8s.io", "topologies.kai.scheduler", "queues.scheduling.run.ai",
          "nodes", "podgroups.scheduling.run.ai", "pods")


class ScenarioError(ValueError):
    pass


def read_documents(path: str | Path) -> list[Obj]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not a text file (UTF-8 YAML expected)") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ScenarioError(f"{path}: not valid YAML: {err}") from err
    return _flatten(docs, str(path))


def _flatten(docs: Iterable[Any], origin: str) -> list[Obj]:
    out: list[Obj] = []
    for n, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ScenarioError(f"{origin}: document {n} is not a mapping")
        if doc.get("kind") == "List" or (doc.get("kind", "").endswith("List") and "items" in doc):
            out.extend(_flatten(doc.get("items") or [], f"{origin} document {n} items"))
        else:
            out.append(doc)
    return out


def classify(objs: Iterable[Obj], origin: str = "scenario") -> list[tuple[ResourceType, Obj]]:
    """Pair each manifest with its type, in load order; errors name the document and field."""
    typed: list[tuple[ResourceType, Obj]] = []
    for n, obj in enumerate(objs):
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not api_version or not kind:
            raise ScenarioError(f"{origin}: document {n}: apiVersion and kind are required")
        rt = by_kind(str(api_version), str(kind))
        if rt is None:
            raise ScenarioError(f"{origin}: document {n}: unsupported apiVersion/kind {api_version}/{kind}")
        if not (obj.get("metadata") or {}).get("name"):
            raise ScenarioError(f"{origin}: document {n} ({kind}): metadata.name is required")
        typed.append((rt, obj))
    return sorted(typed, key=lambda pair: _ORDER.index(pair[0].key) if pair[0].key in _ORDER else len(_ORDER))


def load(store: Store, objs: Iterable[Obj], origin: str = "scenario") -> list[Obj]:
    created: list[Obj] = []
    for rt, obj in classify(objs, origin):
        if rt.key == "pods" and (obj.get("spec") or {}).get("nodeName") and not (obj.get("status") or {}).get("phase"):
            obj = {**obj, "status": running_status(obj, rfc3339(store.now()))}
        created.append(store.create(rt, obj, keep_metadata=True))
    return created
