"""Validation of one value against the OpenAPI v3 subset Kubernetes schemas use (CRD ``openAPIV3Schema``s and the
compact core-kind schemas of ``kai_stream.core.schemas``): types, enums, required fields, minimums, item counts and
unknown fields. Shared by scenario loading (``manifests.load_scenario``) and ``deploy/check_crds.py``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Schema = Mapping[str, Any]
TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}
PRESERVE = "x-kubernetes-preserve-unknown-fields"


@dataclass(frozen=True)
class SchemaError:
    """One problem at ``path`` (dotted, with ``[i]`` for list items); ``unknown`` marks an unknown field."""

    path: str
    problem: str
    unknown: bool = False

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def instance_errors(value: Any, schema: Schema, where: str = "") -> list[SchemaError]:
    """Where ``value`` breaks ``schema``, in document order. An object's field that its schema does not name is
    unknown unless the schema preserves unknown fields or gives ``additionalProperties``."""
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, int | str) and not isinstance(value, bool)
        return [] if ok else [SchemaError(where, "int or string")]
    kind = schema.get("type")
    if kind is not None:
        wrong = (isinstance(value, bool) and kind != "boolean") or not isinstance(value, TYPES[kind])
        if wrong and not (value is None and schema.get("nullable")):
            return [SchemaError(where, f"expected {kind}, got {type(value).__name__} {value!r}")]
    errors: list[SchemaError] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(SchemaError(where, f"{value!r} not one of {list(schema['enum'])}"))
    if "minimum" in schema and isinstance(value, int | float) and value < schema["minimum"]:
        errors.append(SchemaError(where, f"{value} < minimum {schema['minimum']}"))
    if isinstance(value, dict):
        props: Mapping[str, Schema] = schema.get("properties") or {}
        missing = [req for req in schema.get("required", ()) if req not in value]
        errors.extend(SchemaError(_join(where, req), "required") for req in missing)
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in props:
                errors.extend(instance_errors(item, props[key], _join(where, str(key))))
            elif isinstance(extra, Mapping):
                errors.extend(instance_errors(item, extra, _join(where, str(key))))
            elif props and not schema.get(PRESERVE):
                errors.append(SchemaError(_join(where, str(key)), "unknown field", unknown=True))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(SchemaError(where, f"fewer than {schema['minItems']} items"))
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                errors.extend(instance_errors(item, items, f"{where}[{i}]"))
    return errors
