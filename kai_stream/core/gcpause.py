"""``paused_gc``: Python's cyclic garbage collector held off while a piece of work builds many long-lived objects
(a session next to a large ``ClusterState``, a decoded history), so that the collections those allocations
trigger do not rescan them over and over. What the work leaves as garbage goes at the next collection after it;
nothing it computes depends on it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector for the ``with`` block (re-enabled after it unless it was off before)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
