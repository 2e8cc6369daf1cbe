"""``core.gcpause``, the collector's one owner: a pause restores what was there, a freeze moves survivors (not
garbage) out of the scans and the thaw brings them back."""

from __future__ import annotations

import gc
import weakref

from kai_stream.core.gcpause import frozen_heap, paused_gc, settle_heap, thaw_heap


class _Cycle:
    """An object only the cyclic collector frees."""

    def __init__(self) -> None:
        self.me = self


def test_paused_gc_restores_the_collector_as_it_was() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_settle_heap_collects_garbage_then_freezes_survivors() -> None:
    kept = _Cycle()
    try:
        with paused_gc():  # nothing but settle_heap collects the cycle
            garbage = weakref.ref(_Cycle())
            assert garbage() is not None
            settle_heap()
        assert gc.get_freeze_count() > 0
        assert garbage() is None
        assert kept.me is kept
    finally:
        thaw_heap()
    assert gc.get_freeze_count() == 0


def test_frozen_heap_thaws_at_the_end_even_on_error() -> None:
    for collect in (True, False):
        try:
            with frozen_heap(collect=collect):
                assert gc.get_freeze_count() > 0
                raise RuntimeError
        except RuntimeError:
            pass
        assert gc.get_freeze_count() == 0
