"""KAI's ``fairshare-simulator`` (built from the pinned Go module) and the core's ``fairshare.divide`` answer the
same fair shares, GPU and CPU, for generated sibling queues: deserved quotas (some unlimited), requests, limits,
over-quota weights (some 0), priority tiers, and totals that leave fractions to the largest-remainder pass."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from kai_stream.core.scheduler.fairshare import divide
from kai_stream.core.scheduler.framework.info import QueueInfo
from tests.kai_oracle.oracle import FairshareSimulator, fairshare_simulator

UNLIMITED = -1
CASES = 120


@pytest.fixture(scope="module")
def kai() -> Iterator[FairshareSimulator]:
    with fairshare_simulator() as simulator:
        yield simulator


def _case(rng: random.Random) -> tuple[dict[str, int], list[dict[str, Any]]]:
    total = {"GPU": rng.randint(1, 64), "CPU": rng.randint(1, 64) * 1000}
    queues = []
    for i in range(rng.randint(1, 6)):
        shares = {}
        for resource, scale in (("gpu", 1), ("cpu", 1000)):
            shares[resource] = {
                "deserved": rng.choice([UNLIMITED, *range(0, 13)]) * (1 if rng.random() < 0.2 else scale),
                "request": rng.randint(0, 40) * scale,
                "maxAllowed": rng.choice([UNLIMITED, UNLIMITED, rng.randint(0, 40) * scale]),
                "overQuotaWeight": rng.randint(0, 4),
            }
            if shares[resource]["deserved"] < 0:
                shares[resource]["deserved"] = UNLIMITED
        queues.append({
            "uid": f"q{i}", "name": f"q{i}", "priority": rng.choice([0, 0, 1]),
            "creationTimestamp": f"2025-01-01T00:00:{10 + i:02d}Z", "resourceShare": shares,
        })
    return total, queues


def _ours(total: dict[str, int], queues: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    infos = []
    for i, q in enumerate(queues):
        gpu, cpu = q["resourceShare"]["gpu"], q["resourceShare"]["cpu"]

        def milli(value: int) -> int:
            return value if value == UNLIMITED else value * 1000

        info = QueueInfo(
            q["name"], q["uid"], None, q["priority"], float(10 + i),
            quota=[milli(gpu["deserved"]), cpu["deserved"], UNLIMITED],
            limit=[milli(gpu["maxAllowed"]), cpu["maxAllowed"], UNLIMITED],
            weight=[gpu["overQuotaWeight"], cpu["overQuotaWeight"], 1],
        )
        info.request = [gpu["request"] * 1000, cpu["request"], 0]
        infos.append(info)
    gpu_shares = divide(total["GPU"] * 1000, infos, 0)
    cpu_shares = divide(total["CPU"], infos, 1)
    return {q.uid: {"gpu": gpu_shares[q.name] / 1000, "cpu": float(cpu_shares[q.name])} for q in infos}


def test_the_kai_example_request() -> None:
    """KAI's own ``example.http``: 100 GPUs, deserved 10 each, weights 3 and 1."""
    queues = [
        {"uid": "queue1", "name": "test-queue", "priority": 0,
         "resourceShare": {"gpu": {"deserved": 10, "request": 100, "overQuotaWeight": 3}}},
        {"uid": "queue2", "name": "test-queue2", "priority": 0,
         "resourceShare": {"gpu": {"deserved": 10, "request": 100, "overQuotaWeight": 1}}},
    ]
    with fairshare_simulator() as kai:
        answer = kai.simulate({"GPU": 100, "CPU": 16000, "Memory": 32000000}, queues)
    assert {uid: share["gpu"] for uid, share in answer.items()} == {"queue1": 70.0, "queue2": 30.0}


ASKS = 8
"""How often a case KAI answered differently is asked again: KAI hands out a remainder that several queues tie for
in Go map order, so the same request can get different answers from one run to the next."""


def _rounded(answer: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {uid: {"gpu": round(s["gpu"], 6), "cpu": round(s["cpu"], 6)} for uid, s in answer.items()}


def test_generated_sibling_queues_get_kai_fair_shares(kai: FairshareSimulator) -> None:
    """Ours must equal KAI's answer; where KAI's answers to one case vary between runs (a tie it breaks in map
    order), ours must equal one of them."""
    rng = random.Random(25)
    differences = []
    ties = 0
    for n in range(CASES):
        total, queues = _case(rng)
        request: dict[str, float] = {**total, "Memory": 10**9}
        ours = _ours(total, queues)
        answers = [_rounded(kai.simulate(request, queues))]
        if answers[0] != ours:
            answers += [_rounded(kai.simulate(request, queues)) for _ in range(ASKS - 1)]
            if ours in answers:
                ties += 1
                continue
            differences.append((n, answers[0], ours, total, queues))
    assert not differences, f"{len(differences)} differ; first: {differences[0]}"
    assert ties <= CASES // 10, f"{ties} of {CASES} cases matched only one of KAI's varying answers"
