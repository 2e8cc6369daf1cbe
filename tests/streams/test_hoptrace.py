"""The per-batch hop trace: written only when a directory is set, and joined into each pod's hops by the batch that
covers its records' offsets."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_stream import hoptrace


def test_nothing_is_written_without_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAI_STREAM_HOP_TRACE_DIR", raising=False)
    trace = hoptrace.HopTrace("processor")
    trace.batch(0, 1, 2, fetched=1.0)
    assert not trace.enabled and not list(tmp_path.iterdir())


def test_a_pod_is_split_by_the_batches_that_covered_its_offsets(tmp_path: Path) -> None:
    processor, binder = hoptrace.HopTrace("processor", str(tmp_path)), hoptrace.HopTrace("binder", str(tmp_path))
    processor.batch(3, 0, 9, fetched=10.0, taken=10.0, cycled=10.5, committed=10.6)
    processor.batch(3, 10, 20, fetched=11.010, taken=11.020, cycled=11.030, committed=11.055)
    binder.batch(3, 0, 4, fetched=11.057)
    binder.batch(3, 5, 5, fetched=12.0)
    pod = hoptrace.PodPath(created=11.000, published=11.005, observed_at=(3, 12), decided_at=(3, 4), bound=11.065)
    lost = hoptrace.PodPath(created=1.0, published=1.1, observed_at=(3, 99), decided_at=(3, 4), bound=2.0)
    hops = hoptrace.split([pod, lost], hoptrace.read(tmp_path, "processor"), hoptrace.read(tmp_path, "binder"))
    assert {hop: [round(ms, 3) for ms in values] for hop, values in hops.items()} == {
        "connector publish": [5.0],
        "processor fetch": [5.0],
        "processor queue": [10.0],
        "fold + cycle": [10.0],
        "transaction commit": [25.0],
        "binder fetch": [2.0],
        "API bind": [8.0],
    }
