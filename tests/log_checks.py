"""What an end-to-end test checks on the log a pipeline recorded: each pool's decisions chained by ``prev_hash``
(``assert_chained``), and the history keeping every invariant and replaying to the same decisions
(``assert_sound``)."""

from __future__ import annotations

from collections.abc import Sequence

from kai_stream.core.events import Decision, decision_hash
from kai_stream.history.reader import History
from kai_stream.invariants import check_history
from kai_stream.replay.runner import ReplayReport
from kai_stream.replay.testing import assert_replays_identically


def assert_chained(decisions: Sequence[Decision]) -> None:
    """Each pool's decisions, in log order, link from the empty head: every ``prev_hash`` is the hash of the pool's
    decision before it."""
    for pool in sorted({d.pool for d in decisions}):
        head = ""
        for decision in (d for d in decisions if d.pool == pool):
            assert decision.prev_hash == head, f"{pool}: {decision.decision_id} does not follow {head or 'the start'}"
            head = decision_hash(decision)


def assert_sound(history: History) -> ReplayReport:
    """The recorded history breaks no invariant and replays identically; the replay's report."""
    invariants = check_history(history)
    assert invariants.ok, invariants.violation.describe() if invariants.violation else ""
    return assert_replays_identically(history)
