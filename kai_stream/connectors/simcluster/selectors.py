"""Label and field selectors, parsed once per request into a predicate over object dicts.

Label grammar (as the apiserver accepts it): `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
comma-separated (all must hold). Field grammar: `path=v`, `path==v`, `path!=v`, restricted to the field
labels the resource supports; a missing field reads as "".
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kai_stream.connectors.simcluster.errors import ApiError

View = Mapping[str, str]
Predicate = Callable[[View], bool]

_SET_RE = re.compile(r"^([^\s!=(),]+)\s+(in|notin)\s*\(([^()]*)\)$")
LABEL = "label:"
FIELD = "field:"
_KEY_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$")


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _check_key(key: str, selector: str) -> str:
    if not _KEY_RE.match(key):
        raise ApiError(400, f"unable to parse requirement: invalid label key {key!r} in selector {selector!r}")
    return key


def _label_term(term: str, selector: str) -> Predicate:
    m = _SET_RE.match(term)
    if m:
        key = LABEL + _check_key(m.group(1), selector)
        values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
        if m.group(2) == "in":
            return lambda v: v.get(key) in values
        return lambda v: v.get(key) not in values
    if term.startswith("!"):
        key = LABEL + _check_key(term[1:].strip(), selector)
        return lambda v: key not in v
    for op in ("!=", "==", "="):
        if op in term:
            raw_key, _, value = term.partition(op)
            key = LABEL + _check_key(raw_key.strip(), selector)
            value = value.strip()
            if op == "!=":
                return lambda v: v.get(key) != value
            return lambda v: v.get(key) == value
    key = LABEL + _check_key(term, selector)
    return lambda v: key in v


@functools.cache
def _parts(path: str) -> tuple[str, ...]:
    return tuple(path.split("."))


def field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in _parts(path):
        if type(node) is not dict or part not in node:
            return ""
        node = node[part]
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def view(obj: Mapping[str, Any], field_labels: tuple[str, ...]) -> dict[str, str]:
    """The flat str -> str projection selectors read: `label:<key>` for labels, `field:<path>` for field
    labels. Flat string dicts are not tracked by the garbage collector, so history can keep them cheaply."""
    flat = {FIELD + path: field_value(obj, path) for path in field_labels}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for key, value in labels.items():
        flat[LABEL + str(key)] = str(value)
    return flat


def _field_term(term: str, allowed: tuple[str, ...], selector: str) -> Predicate:
    for op in ("!=", "==", "="):
        if op in term:
            path, _, value = term.partition(op)
            path = path.strip()
            value = value.strip()
            break
    else:
        raise ApiError(400, f"invalid selector: {selector!r}; can't understand {term!r}")
    if path not in allowed:
        raise ApiError(400, f'field label not supported: "{path}"')
    key = FIELD + path
    if op == "!=":
        return lambda v: v.get(key, "") != value
    return lambda v: v.get(key, "") == value


@dataclass(frozen=True)
class Selector:
    """All terms of a label selector and a field selector; `matches` is true when every term holds."""

    terms: tuple[Predicate, ...] = ()
    equals: tuple[tuple[str, str], ...] = ()
    """The field terms ``path=value`` as (view key, value): what an indexed list narrows its candidates by."""

    @property
    def empty(self) -> bool:
        return not self.terms

    def required(self, key: str) -> str | None:
        """The value a field equality term requires of view key ``key``, if the selector has one."""
        return next((value for k, value in self.equals if k == key), None)

    def matches(self, flat: View) -> bool:
        return all(t(flat) for t in self.terms)


def parse(label_selector: str | None, field_selector: str | None, field_labels: tuple[str, ...]) -> Selector:
    terms: list[Predicate] = []
    equals: list[tuple[str, str]] = []
    if label_selector:
        terms.extend(_label_term(t, label_selector) for t in _split_top_level(label_selector))
    if field_selector:
        for term in _split_top_level(field_selector):
            terms.append(_field_term(term, field_labels, field_selector))
            if "!=" not in term:
                path, _, value = term.replace("==", "=", 1).partition("=")
                equals.append((FIELD + path.strip(), value.strip()))
    return Selector(tuple(terms), tuple(equals))
