"""Patch documents applied to object dicts: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and the
simple cases of strategic merge patch (lists of named items merged by their merge key).

All functions return a new object and leave their inputs untouched.
"""

from __future__ import annotations

import copy
from typing import Any

from kai_stream.connectors.simcluster.errors import ApiError

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
SUPPORTED = (MERGE, JSON_PATCH, STRATEGIC)

_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "conditions": "type",
    "containerStatuses": "name",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
}


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    if isinstance(patch, list) and isinstance(target, list) and field in _MERGE_KEYS:
        return _merge_list(target, patch, _MERGE_KEYS[field])
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, key)
    return result


def _merge_list(target: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    if not all(isinstance(i, dict) and merge_key in i for i in [*target, *patch]):
        return copy.deepcopy(patch)
    result = [copy.deepcopy(i) for i in target]
    for item in patch:
        index = next((n for n, cur in enumerate(result) if cur[merge_key] == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(strategic_merge_patch(None, item))
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(400, f"invalid JSON pointer {path!r}: must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_insert: bool) -> int:
    if token == "-" and for_insert:
        return len(container)
    if not token.isdigit():
        raise ApiError(422, f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if for_insert else len(container) - 1
    if index > limit:
        raise ApiError(422, f"array index {index} out of bounds")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_insert=False)]
        else:
            raise ApiError(422, f"jsonpatch: path {path!r} does not exist: missing {token!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_insert=False)]
    raise ApiError(422, f"jsonpatch: path {path!r} does not exist")


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise ApiError(422, "jsonpatch: cannot remove the document root")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, for_insert=False))
    raise ApiError(422, f"jsonpatch remove operation does not apply: doc is missing path {path!r}")


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError(422, f"jsonpatch replace operation does not apply: doc is missing key {path!r}")
        parent[last] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(parent, last, for_insert=False)] = value
        else:
            parent.insert(_index(parent, last, for_insert=True), value)
    else:
        raise ApiError(422, f"jsonpatch: cannot add at {path!r}: parent is not an object or array")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise ApiError(
            400,
            "a JSON patch (application/json-patch+json) must be a list of operations; "
            f"send an object with Content-Type {MERGE} instead",
        )
    doc = copy.deepcopy(target)
    for n, op in enumerate(operations):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(400, f"jsonpatch operation {n} needs 'op' and 'path': {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise ApiError(400, f"jsonpatch operation {n} ({kind}) needs 'value'")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=False)
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise ApiError(400, f"jsonpatch operation {n} ({kind}) needs 'from'")
            value = _remove(doc, op["from"]) if kind == "move" else copy.deepcopy(_get(doc, op["from"]))
            doc = _add(doc, path, value, replace=False)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise ApiError(422, f"jsonpatch test operation failed at {path!r}")
        else:
            raise ApiError(400, f"jsonpatch operation {n}: unknown op {kind!r}")
    return doc


def apply(content_type: str, target: dict[str, Any], body: Any, *, builtin: bool) -> dict[str, Any]:
    """Apply a patch body of the given media type; 415 for anything this server (or the real one) refuses."""
    media = content_type.split(";")[0].strip().lower()
    if media == STRATEGIC and not builtin:
        raise ApiError(415, "strategic merge patch is not supported for custom resources; use " + MERGE)
    if media not in SUPPORTED:
        raise ApiError(415, f"the body of the request was in an unknown format - accepted media types include: "
                       f"{', '.join(SUPPORTED)}")
    if media == JSON_PATCH:
        result = json_patch(target, body)
    elif media == MERGE:
        if not isinstance(body, dict):
            raise ApiError(400, "a merge patch must be a JSON object")
        result = merge_patch(target, body)
    else:
        if not isinstance(body, dict):
            raise ApiError(400, "a strategic merge patch must be a JSON object")
        result = strategic_merge_patch(target, body)
    if not isinstance(result, dict):
        raise ApiError(422, "the patched object is not a JSON object")
    return result
