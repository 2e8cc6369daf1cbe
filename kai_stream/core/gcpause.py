"""The one owner of Python's cyclic garbage collector in the project: every pause, freeze and thaw goes through
here, so the rules below stay in one place.

* ``paused_gc``: the collector held off while a piece of work builds many long-lived objects (a session next to
  a large ``ClusterState``, a decoded history), so that the collections those allocations trigger do not rescan
  them over and over. What the work leaves as garbage goes at the next collection after it.
* ``settle_heap``: what is garbage now is collected and every survivor moved to the permanent generation
  (``gc.freeze``, process-wide), so later collections scan only what came after: for a process that keeps a
  large, long-lived state (the processor after a rebuild, a server after start-up, a supervisor before it forks,
  where it also keeps the imported modules' pages shared copy-on-write with the workers).
* ``frozen_heap``: the same for the length of a ``with`` block, thawed after it (a replay over its decoded
  history, a benchmark's measured phase).
* ``freeze_heap``: every object alive now moved to the permanent generation without a collection first: for a
  process that has just imported its modules and is about to build its state (the processor's start), where a
  collection would scan every imported module's objects for the little garbage the imports left (kept for good).
* ``thaw_heap``: back to normal collections (the end of ``frozen_heap``). A forked worker keeps its supervisor's
  frozen set: the imports stay out of its first collections and their pages stay shared.

Nothing any of them does changes what the code computes; only when memory is scanned.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["freeze_heap", "frozen_heap", "paused_gc", "settle_heap", "thaw_heap"]


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


def settle_heap() -> None:
    """Collect what is garbage now, then freeze every surviving object out of later collections."""
    gc.collect()
    gc.freeze()


def freeze_heap() -> None:
    """Freeze every object alive now out of later collections, without collecting first."""
    gc.freeze()


def thaw_heap() -> None:
    """Return every frozen object to the collector's scans."""
    gc.unfreeze()


@contextmanager
def frozen_heap(*, collect: bool = True) -> Iterator[None]:
    """Everything alive at the start of the ``with`` block frozen out of collections until its end (collected
    first unless ``collect`` is false: a caller that just built its data under ``paused_gc`` left little to
    collect, and a full collection over it is what the freeze saves)."""
    if collect:
        settle_heap()
    else:
        gc.freeze()
    try:
        yield
    finally:
        thaw_heap()
