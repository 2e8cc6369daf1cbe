"""The processor's start, milestone by milestone: the first time each is reached it is logged (INFO) with the wall
clock and the process's CPU seconds so far, which ``benchmarks/bench_restart.py`` prints as a restart's phases.

Milestones reached before faust has set up logging (the imports) are held and logged with the next one.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)

MARK = "processor start:"
_reached: dict[str, tuple[float, float]] = {}
_pending: list[str] = []


def reached(milestone: str) -> None:
    """Note ``milestone`` (only its first time) and log it, with any held before logging was set up."""
    if milestone in _reached:
        return
    _reached[milestone] = (time.time(), time.process_time())
    _pending.append(milestone)
    if not logging.getLogger().handlers:
        return
    for held in _pending:
        at, cpu = _reached[held]
        log.info("%s %s at %.3f (cpu %.2fs)", MARK, held, at, cpu)
    _pending.clear()
