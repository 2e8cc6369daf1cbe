"""Queue order through a hierarchy is decided level by level (KAI ``job_order_by_queue.go``, ``traverseToLeaf``):
siblings are compared with their own keys, each offered its own best job, so a department is judged with the job
its best leaf would run next, not with each leaf's job in turn.

Departments ``da`` (deserved 2 GPU; leaves ``la``: deserved 4, priority 200, and ``lb``: deserved 1) and ``db``
(deserved 2; leaf ``lc``). ``la`` outranks ``lb`` inside ``da`` by priority, so ``da``'s best job is ``la``'s
4-GPU job, which takes ``da`` past its deserved 2: ``db`` goes first. Comparing root-to-leaf paths computed with
each leaf's own job (the rule before) put ``lb``'s 1-GPU job first, as ``da`` stays within deserved with it.
"""

from __future__ import annotations

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import AnyEvent, BindRequested, QueueObserved
from kai_stream.core.scheduler.cycle import run_cycle

from .builders import fold, node_events, pending, queue


def _leaf(name: str, parent: str, quota: int, priority: int = 100) -> QueueObserved:
    q = queue(name, parent=parent, gpu_quota=quota * 1000)
    return q.model_copy(update={"queue": q.queue.model_copy(update={"priority": priority})})


def _events(gpus: int) -> list[AnyEvent]:
    return [
        *node_events(1, gpus),
        queue("da", gpu_quota=2000),
        queue("db", gpu_quota=2000),
        _leaf("la", "da", 4, priority=200),
        _leaf("lb", "da", 1),
        _leaf("lc", "db", 2),
        pending(1, 10, "la", 4, "train"),
        pending(2, 11, "lb", 1, "train"),
        pending(3, 12, "lc", 1, "train"),
    ]


def _bound(gpus: int) -> list[str]:
    state = fold(_events(gpus))
    decisions = run_cycle(state, SchedulerConfig(actions=("allocate",)), pool="default", input_offset=state.offset)
    return [d.name for d in decisions if isinstance(d, BindRequested)]


def test_siblings_are_compared_with_their_own_best_job() -> None:
    """Room for all: the binds come in allocation order."""
    assert _bound(8) == ["pend-3", "pend-1", "pend-2"]


def test_the_department_judged_by_its_best_job_decides_who_gets_a_scarce_pool() -> None:
    assert _bound(5) == ["pend-3", "pend-1"]
