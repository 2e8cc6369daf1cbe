"""Wide tables that stay readable in a narrow terminal or a pipe (80 columns): the columns after the first (the
key, e.g. the queue name, never cut) are split over as many tables as it takes, each repeating the key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from rich import box
from rich.table import Table

__all__ = ["Column", "fitted_tables"]

Justify = Literal["left", "right", "center"]
Column = tuple[str, Justify]
_EDGE = 6  # a table's outer borders, and a margin
_PER_COLUMN = 3  # one separator and one space each side


def _width(header: str, cells: Sequence[str]) -> int:
    return max([*(len(word) for word in header.split()), *(len(cell) for cell in cells)], default=1)


def fitted_tables(title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[Table]:
    """``rows`` under ``columns`` as one table when it fits in ``width`` characters, else several; headers wrap
    at spaces, no cell is ever shortened, and a table is as wide as its title (a narrow part would wrap it)."""
    widths = [_width(name, [row[i] for row in rows]) for i, (name, _) in enumerate(columns)]
    key = widths[0] + _PER_COLUMN + _EDGE
    groups: list[list[int]] = [[]]
    used = key
    for i in range(1, len(columns)):
        need = widths[i] + _PER_COLUMN
        if groups[-1] and used + need > width:
            groups.append([])
            used = key
        groups[-1].append(i)
        used += need
    tables = []
    for n, group in enumerate(groups):
        part = f" ({n + 1}/{len(groups)})" if len(groups) > 1 else ""
        table = Table(title=title + part, box=box.HEAVY_HEAD, min_width=min(len(title + part), width))
        for i in [0, *group]:
            name, justify = columns[i]
            table.add_column(name, justify=justify, min_width=widths[i] if i == 0 else None, no_wrap=i == 0)
        for row in rows:
            table.add_row(*(row[i] for i in [0, *group]))
        tables.append(table)
    return tables
