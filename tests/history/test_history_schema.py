"""The history row layout: typed columns that analytics reads instead of parsing ``value``."""

from __future__ import annotations

from kai_stream.core.events import (
    EvictionRequested,
    FairShareRecorded,
    PodObserved,
    PodSpec,
    QueueShare,
    Resources,
    Tick,
)
from kai_stream.history.schema import HISTORY_SCHEMA, HISTORY_V2_COLUMNS, event_row, event_values, rows_frame


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
    evict = event_row("decisions", 0, 2, EvictionRequested(node="n", preemptor="ns/big", **_decision()))
    assert (evict["job"], evict["preemptor"], evict["phase"], evict["node"]) == ("ns/j", "ns/big", None, "n")
    frame = rows_frame([observed, evict])
    assert frame.columns == list(HISTORY_SCHEMA)
    assert set(HISTORY_V2_COLUMNS) <= set(frame.columns)


def test_rows_as_tuples_make_the_same_frame_as_rows_as_dicts() -> None:
    share = QueueShare(
        queue="q", fair_share=Resources(gpu_milli=1), deserved=Resources(gpu_milli=2), allocated=Resources()
    )
    events = [
        Tick(event_id="t", ts=1.0),
        PodObserved(event_id="e", ts=2.0, pod=PodSpec(namespace="ns", name="p", uid="u", queue="q")),
        FairShareRecorded(ts=3.0, input_offset=1, config_hash="h", queues=(share, share)),
        FairShareRecorded(ts=4.0, input_offset=2, config_hash="h", queues=()),
        EvictionRequested(node="n", preemptor="ns/big", **_decision()),
    ]
    for chosen in (events, events[:2], events[2:4], events[3:4]):
        dicts = rows_frame([event_row("t", 0, i, e) for i, e in enumerate(chosen)])
        tuples = rows_frame([event_values("t", 0, i, e) for i, e in enumerate(chosen)])
        assert tuples.schema == dicts.schema and tuples.equals(dicts)
    assert rows_frame([event_values("t", 0, 2, events[2])])["shares"].to_list() == [
        [{"queue": "q", "fair_gpu_milli": 1, "deserved_gpu_milli": 2}] * 2
    ]
