"""What the victim search's simulation leaves in the decisions (beyond the statuses KAI's literals check): a victim put
back on its node (un-evicted) gets no eviction and no pipelined pod waits for it; a moved victim gets an eviction
naming its new node followed by its pipelined copy."""

from __future__ import annotations

from kai_stream.core.events import EvictionRequested, PodPending, PodPipelined

from .kai_harness import Case, load_cases, one_session

CASES = {c.id: c for c in load_cases()}


def _decisions(case_id: str) -> list[tuple[str, str, str | None, tuple[str, ...], str]]:
    case: Case = CASES[case_id]
    _, decisions = one_session(case.topology, (case.action,))
    out: list[tuple[str, str, str | None, tuple[str, ...], str]] = []
    for d in decisions:
        assert not isinstance(d, PodPending)
        waiting = d.waiting_for if isinstance(d, PodPipelined) else ()
        moved_to = d.details.get("move_to", "") if isinstance(d, EvictionRequested) else ""
        out.append((type(d).__name__, d.name, d.node, waiting, moved_to))
    return out


def test_unevicted_victim_leaves_no_decision() -> None:
    """running_job2 (half a GPU) was evicted by the search but fits back on its device once the preemptor took
    running_job1's whole GPU: only running_job1 is evicted, and the preemptor waits for it alone."""
    assert _decisions(
        "preempt__preempt_test::3 train job running, 1 build job pending for the same queue - no need to preempt both"
    ) == [
        ("EvictionRequested", "running_job1-0", "node0", (), ""),
        ("PodPipelined", "pending_job0-0", "node0", ("test/running_job1-0",), ""),
    ]


def test_reclaim_moves_a_victim_that_fits_elsewhere() -> None:
    """q0_job1 leaves node1 for the free GPU of node0 (a move: eviction, then its pipelined copy) and q1_job0 is
    pipelined onto node1."""
    decisions = _decisions(
        "reclaim__reclaim_test::queue0 is under deserved quota, queue1 is over deserved quota but not over fair share"
        " - reclaim"
    )
    assert decisions[0] == ("EvictionRequested", "q0_job1-0", "node1", (), "node0")
    assert sorted(decisions[1:]) == [
        ("PodPipelined", "q0_job1-0", "node0", (), ""),
        ("PodPipelined", "q1_job0-0", "node1", ("test/q0_job1-0",), ""),
    ]
