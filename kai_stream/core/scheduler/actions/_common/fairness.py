"""Queue arithmetic the eviction actions share: within fair share / deserved, over them, saturation, details."""

from __future__ import annotations

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


def saturation(q: QueueInfo, request: list[int]) -> float:
    """allocated / fair share, worst over the requested resources (a queue with no share is at 1 when it uses
    nothing, and at inf when it uses some)."""
    worst = 0.0
    for r in range(3):
        if request[r] <= 0:
            continue
        used, share = q.allocated[r], q.fair_share[r]
        ratio = (used / share) if share > 0 else (INF if used > 0 else 1.0)
        worst = max(worst, ratio)
    return worst


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
