"""The pods of the emulated cluster that finish on their own: the one finish queue every clock keeps.

Under ``Policy.durations`` a bound pod with ``duration_s`` finishes that long after its bind (``finishes_at``).
``Finishing.react`` answers a decision as ``react`` does and keeps the queue: a bind queues the pod's completion,
keyed by the bind's decision; an eviction cancels it. Entries are ordered by finish time, then by when they were
queued. A cancelled completion stays queued until it comes up (a clock may still wake at its time) and is then
answered ``None``: the pod finishes only by the bind that still holds it.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from kai_stream.core.events import BindRequested, ClusterEvent, Decision, EvictionRequested
from kai_stream.core.state import ClusterState
from kai_stream.emulation.react import Marks, Policy, finishes_at, react

__all__ = ["Completion", "Finishing"]


@dataclass(frozen=True)
class Completion:
    """Pod ``uid``, bound by decision ``decision_id``, finishes at ``ts``."""

    ts: float
    uid: str
    decision_id: str


@dataclass
class Finishing:
    """The completions due, in time order (module doc)."""

    policy: Policy
    _queue: list[tuple[float, int, str, str]] = field(default_factory=list)
    _seq: int = 0
    _holding: dict[str, str] = field(default_factory=dict)
    """Per pod uid, the bind that holds it (not evicted since, not finished)."""

    def __len__(self) -> int:
        return len(self._queue)

    def react(self, decision: Decision, state: ClusterState, marks: Marks | None = None) -> list[ClusterEvent]:
        """``react(decision, state, policy, marks)``, queueing the completion of a bound pod, cancelling that of an
        evicted one."""
        pod = state.pods.get(decision.uid)
        caused = react(decision, state, self.policy, marks)
        if isinstance(decision, BindRequested):
            self._holding[decision.uid] = decision.decision_id
            at = finishes_at(decision, pod, self.policy)
            if at is not None:
                self._seq += 1
                heapq.heappush(self._queue, (at, self._seq, decision.uid, decision.decision_id))
        elif isinstance(decision, EvictionRequested):
            self._holding.pop(decision.uid, None)
        return caused

    def next_at(self) -> float:
        """The time of the first completion queued (cancelled or not); ``inf`` when none is."""
        return self._queue[0][0] if self._queue else math.inf

    def pop(self) -> tuple[float, Completion | None]:
        """Take the first completion queued: its time, and the completion unless it was cancelled."""
        at, _, uid, decision_id = heapq.heappop(self._queue)
        if self._holding.get(uid) != decision_id:
            return at, None
        del self._holding[uid]
        return at, Completion(at, uid, decision_id)
