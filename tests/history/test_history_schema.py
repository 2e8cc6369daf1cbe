"""The history row layout: typed columns that analytics reads instead of parsing ``value``."""

from __future__ import annotations

from kai_stream.core.events import EvictionRequested, PodObserved, PodSpec, Resources
from kai_stream.history.schema import HISTORY_SCHEMA, HISTORY_V2_COLUMNS, event_row, rows_frame


def _decision(**extra: object) -> dict[str, object]:
    common = {"decision_id": "d", "ts": 5.0, "input_offset": 3, "config_hash": "h", "code_version": "t"}
    pod = {"action": "reclaim", "namespace": "ns", "name": "p", "uid": "u", "job": "ns/j", "queue": "q"}
    return {**common, **pod, **extra}


def test_event_row_fills_the_typed_columns() -> None:
    spec = PodSpec(
        namespace="ns",
        name="p",
        uid="u",
        queue="q",
        node_name="n",
        phase="Succeeded",
        requests=Resources(gpu_milli=500),
    )
    observed = event_row("cluster-events", 0, 1, PodObserved(event_id="e", ts=2.0, pod=spec))
    assert (observed["phase"], observed["gpu_milli"], observed["job"], observed["preemptor"]) == (
        "Succeeded",
        500,
        None,
        None,
    )
    evict = event_row("decisions", 0, 2, EvictionRequested(node="n", preemptor="ns/big", **_decision()))  # type: ignore[arg-type]
    assert (evict["job"], evict["preemptor"], evict["phase"], evict["node"]) == ("ns/j", "ns/big", None, "n")
    frame = rows_frame([observed, evict])
    assert frame.columns == list(HISTORY_SCHEMA)
    assert set(HISTORY_V2_COLUMNS) <= set(frame.columns)
