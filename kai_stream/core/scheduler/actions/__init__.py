"""Actions by name (every ``ActionName``), run in the order the config lists them. An action is
``run(session) -> None``.

Each action lives in its own module; the victim search that consolidation, reclaim and preempt share is in
``actions/_common``.
"""

from __future__ import annotations

from collections.abc import Callable

from kai_stream.core.events import ActionName
from kai_stream.core.scheduler.actions import allocate, consolidation, preempt, reclaim, stalegangeviction
from kai_stream.core.scheduler.framework.session import Session

Action = Callable[[Session], None]

ACTIONS: dict[ActionName, Action] = {
    "allocate": allocate.run,
    "consolidation": consolidation.run,
    "reclaim": reclaim.run,
    "preempt": preempt.run,
    "stalegangeviction": stalegangeviction.run,
}
