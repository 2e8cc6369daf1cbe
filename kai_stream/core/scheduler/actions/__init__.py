"""Actions by name, run in the order the config lists them. An action is ``run(session) -> None``.

A configured action that is not registered here yet is skipped (consolidation, reclaim, preempt and
stalegangeviction land in their own modules; shared victim search goes in ``actions/_common``).
"""

from __future__ import annotations

from collections.abc import Callable

from kai_stream.core.scheduler.actions import allocate
from kai_stream.core.scheduler.framework.session import Session

Action = Callable[[Session], None]

ACTIONS: dict[str, Action] = {
    "allocate": allocate.run,
}
