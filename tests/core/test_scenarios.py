"""Table-driven scheduling scenarios: every tests/core/scenarios/*.yaml holds manifests and its expectations."""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import SCENARIOS, check

FILES = sorted(SCENARIOS.glob("*.yaml"))


def test_there_are_scenarios() -> None:
    assert len(FILES) >= 12


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario(path: Path) -> None:
    check(path.read_text())


@pytest.mark.parametrize("name", ["fair-share.yaml", "gang-and-fractions.yaml"])
def test_examples_schedule(name: str) -> None:
    text = (Path(__file__).parents[2] / "examples" / name).read_text()
    result = check(text)
    assert any(p["status"] == "Running" for p in result["pods"].values())
