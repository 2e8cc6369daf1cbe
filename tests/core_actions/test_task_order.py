"""Task order inside a job: label ``kai.scheduler/task-priority`` (KAI's taskorder plugin). An elastic job
(minMember 1) on one free GPU gets the task that comes first: labelled with an integer before anything else,
higher first; a label that is not an integer after the integers but before unlabelled tasks."""

from __future__ import annotations

import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    AnyEvent,
    BindRequested,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodSpec,
    Resources,
)
from kai_stream.core.scheduler.cycle import run_cycle

from .builders import GIB, fold, node_events, queue


def _job(labels: list[str | None]) -> list[AnyEvent]:
    group = PodGroupSpec(namespace="t", name="elastic", queue="qa", min_member=1, created=1000.0)
    events: list[AnyEvent] = [PodGroupObserved(event_id="g", ts=0.0, pod_group=group)]
    for i, value in enumerate(labels):
        pod = PodSpec(
            namespace="t",
            name=f"w{i}",
            uid=f"u{i}",
            queue="qa",
            pod_group="elastic",
            requests=Resources(gpu_milli=1000, cpu_milli=1000, memory=GIB),
            labels={} if value is None else {"kai.scheduler/task-priority": value},
            created=1000.0 + i,
        )
        events.append(PodObserved(event_id=f"p{i}", ts=0.0, pod=pod))
    return events


def _first_bound(labels: list[str | None]) -> str:
    state = fold([*node_events(1, 1), queue("qa"), *_job(labels)])
    decisions = run_cycle(state, SchedulerConfig(actions=("allocate",)), pool="default", input_offset=state.offset)
    bound = [d.name for d in decisions if isinstance(d, BindRequested)]
    assert len(bound) == 1
    return bound[0]


@pytest.mark.parametrize(
    ("labels", "first"),
    [
        ([None, None], "w0"),
        (["1", "2"], "w1"),
        (["-3", "+2", "-1"], "w1"),
        ([None, "0"], "w1"),
        ([None, "high", "5"], "w2"),
        ([None, "high"], "w1"),
        (["1_0", "2"], "w1"),
    ],
)
def test_the_task_with_the_highest_task_priority_goes_first(labels: list[str | None], first: str) -> None:
    assert _first_bound(labels) == first
