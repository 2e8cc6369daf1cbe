"""Offline checks for the chart's CustomResourceDefinitions, which kubernetes-validate cannot judge.

1. Each CRD is well-formed and structural: ``metadata.name`` is ``<plural>.<group>``, exactly one storage
   version, every schema node has a ``type`` (or preserves unknown fields / is int-or-string), and objects
   with ``properties`` are ``type: object``.
2. Custom resources (e.g. the Queue / PodGroup / Topology objects in examples/) validate against the CRD
   schema of their ``apiVersion`` + ``kind``: types, enums, required fields, minimums, and unknown fields
   (rejected unless the node preserves them, as the API server would prune them), with the validator
   ``kai-stream simulate`` / ``run`` / ``cluster`` apply to scenarios (``kai_stream.core.schema``).

    python deploy/check_crds.py RENDERED.yaml [RESOURCES.yaml ...]     # exit 1 on any error
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from kai_stream.core.schema import instance_errors as validate

Schema = dict[str, Any]


def load_documents(paths: Iterable[Path]) -> list[tuple[str, dict[str, Any]]]:
    docs: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                docs.append((str(path), doc))
    return docs


def _walk_schema(node: Schema, where: str) -> list[str]:
    errors: list[str] = []
    typed = "type" in node or node.get("x-kubernetes-preserve-unknown-fields") or node.get(
        "x-kubernetes-int-or-string"
    )
    if not typed:
        errors.append(f"{where}: no type (a structural schema needs one)")
    if "properties" in node and node.get("type") != "object":
        errors.append(f"{where}: has properties but type is {node.get('type')!r}")
    if node.get("type") == "array" and not isinstance(node.get("items"), dict):
        errors.append(f"{where}: array without items")
    for name, child in (node.get("properties") or {}).items():
        if not isinstance(child, dict):
            errors.append(f"{where}.{name}: schema is not a mapping")
            continue
        errors.extend(_walk_schema(child, f"{where}.{name}"))
    if isinstance(node.get("items"), dict):
        errors.extend(_walk_schema(node["items"], f"{where}[]"))
    return errors


def crd_errors(crd: dict[str, Any]) -> list[str]:
    """Problems that make a CRD ill-formed or non-structural."""
    name = crd.get("metadata", {}).get("name", "?")
    spec = crd.get("spec", {})
    where = f"CustomResourceDefinition {name}"
    errors: list[str] = []
    expected = f"{spec.get('names', {}).get('plural')}.{spec.get('group')}"
    if name != expected:
        errors.append(f"{where}: metadata.name must be {expected!r}")
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errors.append(f"{where}: scope must be Namespaced or Cluster")
    versions = spec.get("versions") or []
    if sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(f"{where}: exactly one version must be the storage version")
    for version in versions:
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            errors.append(f"{where} {version.get('name')}: no openAPIV3Schema")
            continue
        if schema.get("type") != "object":
            errors.append(f"{where} {version.get('name')}: the root schema must be type: object")
        errors.extend(_walk_schema(schema, f"{where} {version.get('name')}"))
    return errors


def instance_errors(value: Any, schema: Schema, where: str) -> list[str]:
    """Where ``value`` breaks ``schema``: the validator scenario loading uses (``kai_stream.core.schema``)."""
    return [f"{where}.{e.path}: {e.problem}" if e.path else f"{where}: {e.problem}" for e in validate(value, schema)]


def schemas_by_kind(crds: list[dict[str, Any]]) -> dict[tuple[str, str], Schema]:
    out: dict[tuple[str, str], Schema] = {}
    for crd in crds:
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served"):
                api_version = f"{spec['group']}/{version['name']}"
                out[(api_version, spec["names"]["kind"])] = version["schema"]["openAPIV3Schema"]
    return out


def resource_errors(doc: dict[str, Any], schemas: dict[tuple[str, str], Schema]) -> list[str]:
    api_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
    name = (doc.get("metadata") or {}).get("name", "?")
    where = f"{kind} {name}"
    schema = schemas.get((api_version, kind))
    if schema is None:
        return [f"{where}: no CRD serves {api_version} {kind}"]
    return instance_errors(doc, schema, where)


def check(rendered: list[Path], resources: list[Path]) -> tuple[list[str], int]:
    """Errors found, and how many custom resources were validated."""
    crds = [doc for _, doc in load_documents(rendered) if doc.get("kind") == "CustomResourceDefinition"]
    errors = [error for crd in crds for error in crd_errors(crd)]
    schemas = schemas_by_kind(crds)
    groups = {api.split("/")[0] for api, _ in schemas}
    checked = 0
    for path, doc in load_documents(resources):
        if doc.get("apiVersion", "").split("/")[0] in groups:
            checked += 1
            errors.extend(f"{path}: {error}" for error in resource_errors(doc, schemas))
    return errors, checked


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    paths = [Path(arg) for arg in argv]
    errors, checked = check(paths[:1], paths[1:])
    crd_count = sum(1 for _, doc in load_documents(paths[:1]) if doc.get("kind") == "CustomResourceDefinition")
    for error in errors:
        print(f"ERROR {error}", file=sys.stderr)
    print(f"check_crds: {crd_count} CRD(s), {checked} custom resource(s) validated, {len(errors)} error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
