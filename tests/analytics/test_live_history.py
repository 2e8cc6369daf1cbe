"""Analytics on a live history: pods already running when the log starts count for their own queue."""

from __future__ import annotations

from pathlib import Path

from kai_stream.analytics import summarize
from kai_stream.core.events import NodeObserved, NodeSpec, PodObserved, PodRemoved, PodSpec, Resources
from kai_stream.history.schema import event_row, write_segment


def test_pods_running_from_the_start_are_attributed_to_their_queue(tmp_path: Path) -> None:
    node = NodeObserved(event_id="n", ts=0.0, node=NodeSpec(name="n1", allocatable=Resources(gpu_milli=8000)))
    running = PodSpec(
        namespace="t", name="r", uid="r", queue="team-a", requests=Resources(gpu_milli=4000),
        node_name="n1", phase="Running",
    )
    events = [
        node,
        PodObserved(event_id="r0", ts=0.0, pod=running),
        PodRemoved(event_id="r1", ts=100.0, namespace="t", name="r", uid="r"),
    ]
    rows = [event_row("cluster-events", 0, i, e) for i, e in enumerate(events)]
    write_segment(rows, tmp_path / "cluster-events" / "0", f"{0:020d}")
    queues = {q["queue"]: q for q in summarize(tmp_path).queues}
    assert "(none)" not in queues, queues.keys()
    assert queues["team-a"]["avg_allocated_gpus"] > 0
