"""Diff of a rebuilt decision against the recorded one: which fields differ, and how to show both sides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from rich.console import Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from kai_stream.core.events import Decision, dumps

__all__ = ["Divergence", "field_diff", "render_divergence"]


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(_flat(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def field_diff(recorded: Decision | None, rebuilt: Decision | None) -> list[tuple[str, Any, Any]]:
    """(field path, recorded value, rebuilt value) for every field that differs; a missing side is None."""
    left = _flat(orjson.loads(dumps(recorded))) if recorded is not None else {}
    right = _flat(orjson.loads(dumps(rebuilt))) if rebuilt is not None else {}
    return [(k, left.get(k), right.get(k)) for k in sorted(set(left) | set(right)) if left.get(k) != right.get(k)]


@dataclass(frozen=True)
class Divergence:
    """A recorded decision that replay did not rebuild byte for byte (or one side is missing).

    ``index`` is the decision's position in its pool's recorded decisions, ``offset`` its offset in the
    decisions topic (when known), ``input_offset`` the cluster-events offset of the cycle.
    """

    pool: str
    index: int
    offset: int | None
    input_offset: int
    recorded: Decision | None
    rebuilt: Decision | None
    reason: str

    @property
    def fields(self) -> list[tuple[str, Any, Any]]:
        return field_diff(self.recorded, self.rebuilt)

    def headline(self) -> str:
        subject = self.recorded or self.rebuilt
        what = f"{subject.type} {subject.namespace}/{subject.name}" if subject is not None else "?"
        where = f"decisions offset {self.offset}" if self.offset is not None else f"decision #{self.index}"
        return f"pool {self.pool}, {where} (cycle at cluster-events offset {self.input_offset}): {what}: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "index": self.index,
            "offset": self.offset,
            "input_offset": self.input_offset,
            "reason": self.reason,
            "recorded": orjson.loads(dumps(self.recorded)) if self.recorded is not None else None,
            "rebuilt": orjson.loads(dumps(self.rebuilt)) if self.rebuilt is not None else None,
            "fields": [{"field": f, "recorded": a, "rebuilt": b} for f, a, b in self.fields],
        }


def _side(decision: Decision | None, title: str) -> Panel:
    if decision is None:
        return Panel("(none)", title=title)
    text = orjson.dumps(orjson.loads(dumps(decision)), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    return Panel(Syntax(text, "json", word_wrap=True), title=title)


def render_divergence(divergence: Divergence) -> Group:
    """Both sides as JSON panels next to each other, and a table of the fields that differ."""
    sides = Table.grid(expand=True, padding=(0, 1))
    sides.add_column(ratio=1)
    sides.add_column(ratio=1)
    sides.add_row(_side(divergence.recorded, "recorded"), _side(divergence.rebuilt, "rebuilt by replay"))
    fields = Table(title="fields that differ", show_lines=False)
    fields.add_column("field", style="bold")
    fields.add_column("recorded", style="red")
    fields.add_column("rebuilt", style="green")
    for name, left, right in divergence.fields:
        fields.add_row(name, repr(left), repr(right))
    return Group(f"[bold red]first divergence[/]: {divergence.headline()}", sides, fields)
