"""One scheduling step on a folded state: cycle -> chain -> fold, the same wherever decisions are made.

``decide`` runs ``run_cycle`` on ``pool``, links its decisions into the pool's hash chain after ``head`` and folds
them into the state (decisions live in the decisions topic: folded without an offset); ``fold_linked`` is the
chain-and-fold half for a caller that ran the cycle itself. Both return each linked decision with its canonical
bytes (``dumps``) and the new head. The processor, ``simulate``, the what-if engine and the trace simulator all
step through here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import kai_stream
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import Decision, chain_encoded
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session

__all__ = ["Linked", "decide", "fold_linked"]

Linked = list[tuple[Decision, bytes]]


def fold_linked(state: ClusterState, decisions: list[Decision], head: str) -> tuple[Linked, str]:
    """Chain ``decisions`` after ``head`` and fold them into ``state``; the linked decisions and the new head."""
    linked, head = chain_encoded(decisions, head)
    for decision, _ in linked:
        apply(state, decision)
    return linked, head


def decide(
    state: ClusterState,
    config: SchedulerConfig,
    *,
    pool: str,
    head: str,
    input_offset: int | None = None,
    code_version: str = kai_stream.__version__,
    inspect: Callable[[Session], None] | None = None,
) -> tuple[Linked, str]:
    """``run_cycle`` on ``pool`` (at ``input_offset``, by default the state's), then ``fold_linked``."""
    offset = state.offset if input_offset is None else input_offset
    made = run_cycle(state, config, pool=pool, input_offset=offset, code_version=code_version, inspect=inspect)
    return fold_linked(state, made, head)
