"""CPU seconds and peak resident memory of a component's processes, from /proc (Linux).

``cpu_seconds`` is user + system time of a process and of its live descendants; ``peak_rss_kib`` their peak
resident sets (VmHWM, the kernel's high-water mark) added up. A component's CPU over a window is the difference
of two readings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def cpu_seconds(pid: int) -> float:
    ticks = 0
    for member in descendants(pid):
        fields = _stat_fields(member)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def peak_rss_kib(pid: int) -> int:
    total = 0
    for member in descendants(pid):
        try:
            lines = (PROC / str(member) / "status").read_text().splitlines()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in lines if line.startswith("VmHWM:")), 0)
    return total


@dataclass(frozen=True)
class Usage:
    cpu_s: float
    peak_rss_mib: float


class UsageMeter:
    """Readings of named processes: ``mark()`` at the start of the window, ``read()`` at its end."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self._start: dict[str, float] = {}

    def mark(self) -> None:
        self._start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def read(self) -> dict[str, Usage]:
        return {name: Usage(cpu_seconds(pid) - self._start.get(name, 0.0), peak_rss_kib(pid) / 1024)
                for name, pid in self.pids.items()}
