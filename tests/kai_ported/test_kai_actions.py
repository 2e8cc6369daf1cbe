"""KAI Scheduler's own reclaim, preempt and consolidation tests, ported case by case (``cases/*.json``), run on
the project's scheduler with KAI's test defaults (``kai_harness``).

A case that fails because of a known deviation that is not fixed yet is listed in ``deviations.json`` with the
deviation it shows (C1..C13 of the conformance issue); it is a strict xfail, so it turns red once it passes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .kai_harness import Case, load_cases, run_case

DEVIATIONS: dict[str, str] = json.loads((Path(__file__).parent / "deviations.json").read_text())
CASES = load_cases()


def _param(case: Case) -> object:
    reason = DEVIATIONS.get(case.id)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_kai_case(case: Case) -> None:
    problems = run_case(case)
    assert not problems, f"{case.source} {case.function} {case.name!r}:\n" + "\n".join(problems)


def test_every_deviation_names_a_ported_case() -> None:
    ids = {c.id for c in CASES}
    assert sorted(set(DEVIATIONS) - ids) == []


def test_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
