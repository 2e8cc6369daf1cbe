"""Every scenario of the core's and the actions' suites settles when all five default actions run.

The core's own scenario tests run allocate alone; this guards the interplay (e.g. consolidation must not move
a job to admit one its queue's limit refuses, then move it back the next cycle, forever).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.manifests import load_scenario
from kai_stream.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "core" / "scenarios").glob("*.yaml")) + sorted(
    (ROOT / "core_actions" / "scenarios").glob("*.yaml")
)


def _manifests(path: Path) -> str:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") not in ("Expect", "Config")]
    return yaml.safe_dump_all(docs)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_scenario_settles_under_default_actions(path: Path) -> None:
    result = simulate(load_scenario(_manifests(path)), SchedulerConfig(), cycles=50)
    assert result.settled, f"{path.name} still decides after 50 cycles"


def test_consolidation_does_not_admit_a_job_over_its_queue_limit() -> None:
    result = simulate(
        load_scenario(_manifests(ROOT / "core" / "scenarios" / "limits.yaml")), SchedulerConfig(), cycles=50
    ).to_json()
    pods = result["pods"]
    assert pods["t/a-3"]["status"] == "Pending"
    assert pods["t/b-2"]["status"] == "Pending"
    assert not [d for d in result["decisions"] if d["type"] == "EvictionRequested"]
    assert result["queues"]["parent"]["allocated"]["gpu"] == 5
