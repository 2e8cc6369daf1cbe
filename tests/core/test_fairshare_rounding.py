"""KAI's fair-share division rules, ported from ``plugins/proportion/resource_division/resource_division_test.go``
(``setResourceShare`` / ``divideOverQuotaResource`` on GPU): each case names its KAI ``It`` / ``Entry``; the
numbers are KAI's literals (GPU in devices; ``request`` is KAI's ``Request`` = allocated + pending, here all
pending). ``remaining`` is what the division leaves undistributed (KAI's return value, never negative).
"""

from __future__ import annotations

from typing import Any

import pytest

from kai_stream.core.scheduler.fairshare import divide
from kai_stream.core.scheduler.framework.info import GPU, QueueInfo

UNL = -1


def _queue(
    uid: str, deserved: float, weight: float, request: float, limit: float = UNL, priority: int = 100
) -> QueueInfo:
    q = QueueInfo(
        name=f"queue-{uid}",
        uid=uid,
        parent_name=None,
        priority=priority,
        created=float(uid),
        quota=[UNL if deserved == UNL else round(deserved * 1000), UNL, UNL],
        limit=[UNL if limit == UNL else round(limit * 1000), UNL, UNL],
        weight=[int(weight), 1, 1],
    )
    q.request[GPU] = round(request * 1000)
    return q


def _divide(total: float, queues: list[QueueInfo]) -> tuple[dict[str, float], float]:
    shares = divide(round(total * 1000), queues, GPU)
    remaining = max(0, round(total * 1000) - sum(shares.values()))
    return {q.uid: shares[q.name] / 1000 for q in queues}, remaining / 1000


@pytest.mark.parametrize(
    ("name", "total", "changes", "share", "remaining"),
    [
        ("gives requested GPUs - no remaining", 2, {}, 2, 0),
        ("gives requested GPUs with remaining", 3, {}, 2, 1),
        ("doesn't give more GPUs than allowed", 3, {"limit": 2}, 2, 1),
        ("gives up to deserved when over subscribed", 1, {}, 2, 0),
        ("gives up to full quota", 7, {"request": 5}, 3, 4),
        ("gives with fraction, if stated in deserved", 2, {"deserved": 1.5}, 1.5, 0.5),
        ("gives with fraction, if stated in request", 2, {"request": 1.5}, 1.5, 0.5),
        ("doesn't give if deserved is zero", 2, {"deserved": 0}, 0, 2),
    ],
)
def test_single_queue_within_quota(
    name: str, total: float, changes: dict[str, float], share: float, remaining: float
) -> None:
    """Context "single queue within quota (sanity)": deserved 3, weight 0, request 2."""
    spec: dict[str, Any] = {"deserved": 3, "weight": 0, "request": 2, **changes}
    shares, left = _divide(total, [_queue("1", **spec)])
    assert (shares["1"], left) == (share, remaining), name


@pytest.mark.parametrize(
    ("name", "over_quota", "changes", "share", "remaining"),
    [
        ("gives requested GPUs no remaining", 2, {}, 5, 0),
        ("gives requested GPUs with remaining", 3, {}, 5, 1),
        ("doesn't give more GPUs than allowed", 2, {"limit": 4}, 4, 1),
        ("doesn't give when over quota weight is zero", 2, {"weight": 0}, 3, 2),
    ],
)
def test_single_queue_over_quota(
    name: str, over_quota: float, changes: dict[str, float], share: float, remaining: float
) -> None:
    """Context "single queue over quota (sanity)": deserved 3 (already given), weight 1, request 5;
    ``divideOverQuotaResource(over_quota)`` is the division of 3 + over_quota."""
    spec: dict[str, Any] = {"deserved": 3, "weight": 1, "request": 5, **changes}
    shares, left = _divide(3 + over_quota, [_queue("1", **spec)])
    assert (shares["1"], left) == (share, remaining), name


TWO_QUEUES = [
    ("allocates many available gpus", 15, {}, {}, {}, {}, {"1": 6, "2": 6}, 3),
    ("allocates exact requested amount gpus", 12, {}, {}, {}, {}, {"1": 6, "2": 6}, 0),
    ("allocates GPUs proportionally", 8, {}, {}, {"1": 1, "2": 3}, {}, {"1": 3, "2": 5}, 0),
    ("doesn't allocate more than allowed", 12, {}, {"1": 5}, {}, {}, {"1": 5, "2": 6}, 1),
    (
        "distributes remainder between queues based on largest remaining",
        11,
        {"1": 10, "2": 10},
        {},
        {"1": 1, "2": 4},
        {},
        {"1": 3, "2": 8},
        0,
    ),
    ("distributes remainder between queues based on creation time", 11, {}, {}, {}, {}, {"1": 6, "2": 5}, 0),
    ("priority doesn't affect deserved", 4, {}, {}, {}, {"1": 1, "2": 2}, {"1": 2, "2": 2}, 0),
    ("priority does affect over-quota", 6, {}, {}, {}, {"1": 1, "2": 2}, {"1": 2, "2": 4}, 0),
    (
        "priority does affect over-quota, even when overQuotaWeight is set",
        6,
        {},
        {},
        {"1": 100, "2": 1},
        {"1": 1, "2": 2},
        {"1": 2, "2": 4},
        0,
    ),
]


@pytest.mark.parametrize(("name", "total", "asked", "limit", "weight", "priority", "share", "remaining"), TWO_QUEUES)
def test_two_queues(
    name: str,
    total: float,
    asked: dict[str, float],
    limit: dict[str, float],
    weight: dict[str, float],
    priority: dict[str, int],
    share: dict[str, float],
    remaining: float,
) -> None:
    """DescribeTable "two queues": each queue deserved 2, weight 2, request 6, created queue 1 first."""
    queues = [
        _queue(
            uid,
            deserved=2,
            weight=weight.get(uid, 2),
            request=asked.get(uid, 6),
            limit=limit.get(uid, UNL),
            priority=priority.get(uid, 100),
        )
        for uid in ("1", "2")
    ]
    shares, left = _divide(total, queues)
    assert (shares, left) == (share, remaining), name


def test_divides_the_remainder_even_when_using_priorities() -> None:
    """It "divides the remainder even when using priorities": 5 GPUs; queues 1 and 2 (priority 2, deserved 2,
    weight 2, request 5) and 3 (priority 1, deserved 1, request 0) → 3, 2, 0."""
    queues = [
        _queue("1", deserved=2, weight=2, request=5, priority=2),
        _queue("2", deserved=2, weight=2, request=5, priority=2),
        _queue("3", deserved=1, weight=2, request=0, priority=1),
    ]
    assert _divide(5, queues) == ({"1": 3, "2": 2, "3": 0}, 0)


def test_two_queues_over_quota_weight_zero_gets_nothing_more() -> None:
    """Context "two queues over quota (sanity)", It "doesn't give when over quota weight is zero": queue 1
    (deserved 3, weight 0, request 5) keeps 3; queue 2 (deserved 3, request 3) keeps 3; 10 more stay undivided."""
    queues = [_queue("1", deserved=3, weight=0, request=5), _queue("2", deserved=3, weight=1, request=3)]
    assert _divide(16, queues) == ({"1": 3, "2": 3}, 10)
