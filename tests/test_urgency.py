"""``urgency.is_feedback``: only records that repeat a decision may wait for a batch."""

from __future__ import annotations

from typing import Any

import pytest

from kai_stream.core.events import (
    BindFailed,
    NodeObserved,
    NodeSpec,
    PodBound,
    PodEvicted,
    PodObserved,
    PodRemoved,
    PodSpec,
    Tick,
)
from kai_stream.urgency import is_feedback


def observed(**pod: Any) -> PodObserved:
    spec = PodSpec(namespace="ns", name="p", uid="u", queue="q", **pod)
    return PodObserved(event_id="e", ts=1.0, pod=spec)


OUTCOME = {"event_id": "o", "ts": 1.0, "decision_id": "d", "namespace": "ns", "name": "p", "uid": "u"}


@pytest.mark.parametrize(
    "event",
    [
        observed(node_name="n1", phase="Pending"),
        observed(node_name="n1", phase="Running"),
        PodBound(node="n1", **OUTCOME),
    ],
)
def test_a_repeated_decision_is_feedback(event: object) -> None:
    assert is_feedback(event)


@pytest.mark.parametrize(
    "event",
    [
        observed(),  # a new pending pod
        observed(node_name="n1", phase="Succeeded"),  # frees its node
        observed(node_name="n1", phase="Failed"),
        observed(node_name="n1", phase="Running", terminating=True),
        observed(node_name="n1", phase="Running", managed=False),  # another scheduler's pod takes capacity
        PodRemoved(event_id="r", ts=1.0, namespace="ns", name="p", uid="u"),
        BindFailed(node="n1", error="conflict", **OUTCOME),
        PodEvicted(**OUTCOME),
        NodeObserved(event_id="n", ts=1.0, node=NodeSpec(name="n1")),
        Tick(event_id="t", ts=1.0),
    ],
)
def test_anything_else_is_urgent(event: object) -> None:
    assert not is_feedback(event)
