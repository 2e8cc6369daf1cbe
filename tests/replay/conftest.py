"""Recorded logs for the replay tests: the example scenarios played through the in-process engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.manifests import load_scenario
from kai_stream.replay.engine import EngineRun, run_engine

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCENARIOS = sorted(EXAMPLES.glob("*.yaml"))


def engine_log(path: Path, config: SchedulerConfig | None = None) -> EngineRun:
    return run_engine(load_scenario(path.read_text()), config or SchedulerConfig())


@pytest.fixture(params=SCENARIOS, ids=[p.stem for p in SCENARIOS])
def scenario_run(request: pytest.FixtureRequest) -> EngineRun:
    run: EngineRun = engine_log(request.param)
    return run
