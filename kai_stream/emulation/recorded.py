"""How a simulated run's cluster and clock behaved, as recorded in its history (``ConfigRecorded.emulation``).

A trace run writes its ``Emulation``; a what-if of that history reads it back and re-simulates with the same
answers (``Policy``: an evicted pod restarted, not dropped) and the same clock rules (when a cycle runs, when
it is repeated), so the baseline re-run reproduces the recorded decisions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import orjson

from kai_stream.emulation.react import Policy

__all__ = ["Emulation", "emulation_json", "emulation_of"]


@dataclass(frozen=True)
class Emulation:
    """``policy``: the cluster's answers. ``cycle_every``: 0 = a cycle at every distinct event time (arrivals and
    completions), P > 0 = cycles only at the run's ``Tick``s (completions fold at their own times).
    ``max_cycles``: cycles at one time at most; ``repeat_after_binds``: whether a cycle that only bound pods is
    followed by another at the same time (the trace run repeats only after evictions or pipelining)."""

    policy: Policy
    cycle_every: float = 0.0
    max_cycles: int = 8
    repeat_after_binds: bool = False


def emulation_json(emulation: Emulation) -> str:
    """The canonical JSON recorded in ``ConfigRecorded.emulation``."""
    return orjson.dumps(asdict(emulation), option=orjson.OPT_SORT_KEYS).decode()


def emulation_of(recorded: str) -> Emulation | None:
    """The ``Emulation`` a history recorded; None for a live run (empty) or a record this code cannot read."""
    if not recorded:
        return None
    try:
        data: Any = orjson.loads(recorded)
        policy = Policy(**data.pop("policy"))
        return Emulation(policy=policy, **data)
    except (orjson.JSONDecodeError, TypeError, KeyError, AttributeError):
        return None
