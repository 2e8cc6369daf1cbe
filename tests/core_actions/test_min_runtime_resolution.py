"""Min-runtime resolution on a queue tree: preempt from the victim's leaf up; reclaim from one level below the
lowest common ancestor of the two leaves, on the victim's side, up; the pool default where nothing is set."""

from __future__ import annotations

from kai_stream.core.events import QueueSpec
from kai_stream.core.scheduler.framework.builder import queue_info
from kai_stream.core.scheduler.framework.info import QueueInfo
from kai_stream.core.scheduler.plugins.minruntime import preempt_min_runtime, reclaim_min_runtime, reclaim_origin


def _tree(*paths: str, **limits: tuple[float | None, float | None]) -> dict[str, QueueInfo]:
    """Queues from dotted paths ("root.A.B"); ``limits[name]`` = (preempt, reclaim)."""
    queues: dict[str, QueueInfo] = {}
    for path in paths:
        parent: QueueInfo | None = None
        for name in path.split("."):
            q = queues.get(name)
            if q is None:
                preempt, reclaim = limits.get(name, (None, None))
                q = queues[name] = QueueInfo(
                    name, name, parent.name if parent else None, 100, 0.0, [0] * 3, [-1] * 3, [1] * 3
                )
                q.preempt_min_runtime_s, q.reclaim_min_runtime_s = preempt, reclaim
                if parent is not None:
                    q.parent = parent
                    parent.children.append(q)
            parent = q
    return queues


def test_reclaim_origin_is_one_level_below_the_common_ancestor_on_the_victim_side() -> None:
    q = _tree("root.A.B.C.leaf1", "root.A.B.D.leaf2", "root.A.B.C.leaf3", "other.leaf4")
    assert reclaim_origin(q["leaf1"], q["leaf2"]) is q["D"]
    assert reclaim_origin(q["leaf1"], q["leaf3"]) is q["leaf3"]
    assert reclaim_origin(q["leaf4"], q["leaf2"]) is q["root"]
    assert reclaim_origin(None, q["leaf2"]) is q["root"]


def test_reclaim_limit_ignores_values_below_the_origin_and_falls_back_to_the_pool() -> None:
    q = _tree(
        "root.A.B.C.leaf1",
        "root.A.B.D.leaf2",
        "root.A.B.D.leaf5",
        leaf2=(None, 60.0),
        D=(None, 3600.0),
        A=(None, 7200.0),
    )
    assert reclaim_min_runtime(q["leaf1"], q["leaf2"], 5.0) == 3600.0  # from D up: D's own
    assert reclaim_min_runtime(q["leaf5"], q["leaf2"], 5.0) == 60.0  # sibling: leaf2's own
    assert reclaim_min_runtime(q["leaf2"], q["leaf1"], 5.0) == 7200.0  # from C up: C, B unset, A
    bare = _tree("x.l1", "x.l2")
    assert reclaim_min_runtime(bare["l1"], bare["l2"], 5.0) == 5.0


def test_preempt_limit_walks_from_the_victim_leaf_up() -> None:
    q = _tree("root.A.leaf1", "root.A.leaf2", leaf1=(0.0, None), A=(-1.0, 30.0))
    assert preempt_min_runtime(q["leaf1"], 9.0) == 0.0  # an explicit 0 stops the walk: no protection
    assert preempt_min_runtime(q["leaf2"], 9.0) == -1.0
    assert preempt_min_runtime(_tree("solo")["solo"], 9.0) == 9.0


def test_min_runtime_shorthand_fills_only_the_unset_limit() -> None:
    info = queue_info(QueueSpec(name="q", min_runtime_s=600.0, reclaim_min_runtime_s=60.0))
    assert (info.preempt_min_runtime_s, info.reclaim_min_runtime_s) == (600.0, 60.0)
    info = queue_info(QueueSpec(name="q"))
    assert (info.preempt_min_runtime_s, info.reclaim_min_runtime_s) == (None, None)
