"""Every scenario log (tests/core/scenarios and examples, through kai_stream.simulate) replays identically,
with the scenario's own config and with every action on; a forged decision is pinpointed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_stream.core.config import SchedulerConfig, parse_config
from kai_stream.core.events import BindRequested
from kai_stream.core.manifests import load_scenario
from kai_stream.replay.simulated import replay_simulation
from kai_stream.replay.testing import assert_simulation_replays_identically
from kai_stream.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "tests" / "core" / "scenarios").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))


def _split(path: Path) -> tuple[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    expect: dict[str, Any] = next((d for d in docs if d.get("kind") == "Expect"), {})
    return yaml.safe_dump_all([d for d in docs if d.get("kind") != "Expect"], sort_keys=False), expect


def test_there_are_scenario_logs() -> None:
    assert len(FILES) >= 14


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
@pytest.mark.parametrize("actions", ["scenario", "all"])
def test_scenario_log_replays_identically(path: Path, actions: str) -> None:
    manifests, expect = _split(path)
    overrides = dict(expect.get("config") or {})
    if actions == "scenario" and path.parent.name == "scenarios":
        overrides = {"actions": ["allocate"], **overrides}
    config = parse_config(overrides) if actions == "scenario" else parse_config(
        {k: v for k, v in overrides.items() if k != "actions"}
    )
    events = load_scenario(manifests, scheduler_name=config.scheduler_name, default_queue=config.default_queue)
    result = simulate(events, config, cycles=int(expect.get("cycles", 20)))
    report = assert_simulation_replays_identically(events, result.decisions, config)
    assert report.identical == len(result.decisions)


def test_forged_simulation_decision_is_pinpointed() -> None:
    events = load_scenario((ROOT / "examples" / "fair-share.yaml").read_text())
    config = SchedulerConfig()
    decisions = simulate(events, config).decisions
    index = max(i for i, d in enumerate(decisions) if isinstance(d, BindRequested))
    forged = decisions[index]
    assert isinstance(forged, BindRequested)
    decisions[index] = forged.model_copy(update={"gpu_indices": (7,) if forged.gpu_indices != (7,) else (6,)})
    report = replay_simulation(events, decisions, config)
    first = report.first_divergence
    assert first is not None and first.index == index
    assert [f for f, _, _ in first.fields] == ["gpu_indices"]
