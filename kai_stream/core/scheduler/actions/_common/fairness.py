"""Queue arithmetic the eviction actions share: within fair share / deserved, over them, saturation, details."""

from __future__ import annotations

from collections.abc import Collection

from kai_stream.core.scheduler.framework.info import RESOURCES, UNIT, QueueInfo

UNLIMITED = -1
INF = float("inf")


def within(q: QueueInfo, request: list[int], bound: list[int]) -> bool:
    """allocated + request <= bound on every requested resource (a bound of -1 is unlimited)."""
    a = q.allocated
    return not (
        (request[0] > 0 and bound[0] != UNLIMITED and a[0] + request[0] > bound[0])
        or (request[1] > 0 and bound[1] != UNLIMITED and a[1] + request[1] > bound[1])
        or (request[2] > 0 and bound[2] != UNLIMITED and a[2] + request[2] > bound[2])
    )


def over(q: QueueInfo, request: list[int], bound: list[int]) -> bool:
    """allocated > bound on some resource the preemptor requests."""
    a = q.allocated
    return (
        (request[0] > 0 and bound[0] != UNLIMITED and a[0] > bound[0])
        or (request[1] > 0 and bound[1] != UNLIMITED and a[1] > bound[1])
        or (request[2] > 0 and bound[2] != UNLIMITED and a[2] > bound[2])
    )


def _ratio(used: int, share: int) -> float:
    if share == UNLIMITED:
        return 0.0
    if share == 0:
        return INF if used > 0 else 0.0
    return used / share


def saturation_lower(mine: QueueInfo, sibling: QueueInfo, resources: Collection[int]) -> bool:
    """KAI's reclaim saturation check between the reclaimer side ``mine`` and a ``sibling`` that lost victims, on
    the ``resources`` involved: refused only where the reclaimer side ends above its fair share (ratio > 1) and at
    or above the sibling's ratio, for a sibling with a fair share (both unlimited: not compared)."""
    for r in sorted(resources):
        share, other = mine.fair_share[r], sibling.fair_share[r]
        if share == UNLIMITED and other == UNLIMITED:
            continue
        ratio = _ratio(mine.allocated[r], share)
        if ratio > 1 and other > 0 and ratio >= _ratio(sibling.allocated[r], other):
            return False
    return True


def _fmt(r: int, value: int) -> str:
    if value == UNLIMITED:
        return "-1"
    return f"{value / UNIT:g}" if r == 0 else str(value)


def queue_details(prefix: str, q: QueueInfo) -> dict[str, str]:
    """A queue's numbers for an eviction's details (GPU in devices, CPU millicores, memory bytes)."""
    out = {"queue" if prefix == "queue" else f"{prefix}_queue": q.name}
    for r, name in enumerate(RESOURCES):
        out[f"{prefix}_{name}_fair_share"] = _fmt(r, q.fair_share[r])
        out[f"{prefix}_{name}_allocated"] = _fmt(r, q.allocated[r])
        out[f"{prefix}_{name}_deserved"] = _fmt(r, q.quota[r])
    return out
