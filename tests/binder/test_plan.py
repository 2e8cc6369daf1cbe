"""plan(): which API actions a batch of decisions-topic records needs (pure, no I/O)."""

from __future__ import annotations

from typing import Any

from kai_stream.binder.plan import Bind, Evict, MarkUnschedulable, lanes, plan
from kai_stream.core.events import ConfigRecorded, DecisionsRecord, PodPipelined

from .builders import bind, evict, pending


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}}


A, B = _pod("a"), _pod("b")


def test_actionable_decisions_map_to_actions_in_log_order() -> None:
    records: list[DecisionsRecord] = [
        ConfigRecorded(ts=0, config_hash="c", code_version="v", config="{}"),
        bind(A, "n1", offset=1),
        PodPipelined(**bind(B, "n2").model_dump(exclude={"type", "gpu_indices", "gpu_fraction_milli", "dra_devices"})),
        evict(B, offset=3),
    ]
    actions = plan(records)
    assert [type(a) for a in actions] == [Bind, Evict]
    assert [a.decision.name for a in actions] == ["a", "b"]


def test_repeated_and_already_applied_decisions_are_skipped() -> None:
    first, second = bind(A, "n1", offset=1), bind(B, "n1", offset=1)
    assert plan([first, first, second]) == [Bind(first), Bind(second)]
    assert plan([first, second], done={first.decision_id}) == [Bind(second)]


def test_pending_mark_is_superseded_by_a_later_word_about_the_same_pod() -> None:
    old, new = pending(A, "no GPU", offset=1), pending(A, "still no GPU", offset=2)
    bound = bind(A, "n1", offset=3)
    other = pending(B, "queue over limit", offset=1)
    assert plan([old, other, new]) == [MarkUnschedulable(other), MarkUnschedulable(new)]
    assert plan([old, bound, other]) == [Bind(bound), MarkUnschedulable(other)]
    later = pending(A, "bind failed, pending again", offset=4)
    assert plan([bound, later]) == [Bind(bound), MarkUnschedulable(later)]


def test_lanes_keep_each_pods_actions_in_order() -> None:
    actions = plan([bind(A, "n1", offset=1), bind(B, "n1", offset=1), evict(A, offset=2)])
    grouped = lanes(actions)
    assert [[type(a).__name__ for a in lane] for lane in grouped] == [["Bind", "Evict"], ["Bind"]]
    assert [lane[0].decision.name for lane in grouped] == ["a", "b"]
