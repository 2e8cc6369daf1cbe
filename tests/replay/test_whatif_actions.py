"""What-if with another config: turning reclaim off (``actions: [allocate]``) removes the evictions a queue
suffered and makes the reclaiming queue wait, shown per queue in the report (API and ``kai-stream replay --config``).
"""

from __future__ import annotations

import json
from pathlib import Path

from replay_manifests import NODE, pod, queue
from typer.testing import CliRunner

from kai_stream.cli import _register, app
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ObservedEvent, PodObserved
from kai_stream.core.manifests import load_scenario
from kai_stream.history.export import write_history
from kai_stream.history.reader import read_history
from kai_stream.replay.engine import run_engine
from kai_stream.replay.whatif import load_whatif, run_whatif

ARRIVAL_A = 100.0  # qa's pods arrive while qb holds the whole cluster




def _events() -> list[ObservedEvent]:
    """qb's four 1000 s jobs fill the node at t=0; qa's two 100 s jobs arrive at t=100 (qa is under its quota)."""
    pods = [pod(f"b{i}", "qb", 1000, "train") for i in range(4)] + [pod(f"a{i}", "qa", 100, "train") for i in range(2)]
    events = load_scenario("---".join([NODE, queue("qa", 2), queue("qb", 2), *pods]))
    late = [e for e in events if isinstance(e, PodObserved) and e.pod.queue == "qa"]
    assert len(late) == 2
    return [e for e in events if e not in late] + [e.model_copy(update={"ts": ARRIVAL_A}) for e in late]


def _history(tmp_path: Path) -> tuple[Path, Path]:
    run = run_engine(_events(), SchedulerConfig())
    directory = tmp_path / "history"
    write_history(directory, [run.log])
    other = tmp_path / "no-reclaim.yaml"
    other.write_text("actions: [allocate]\n")
    return directory, other


def test_turning_reclaim_off_removes_evictions_and_lengthens_the_wait(tmp_path: Path) -> None:
    directory, other = _history(tmp_path)
    report = run_whatif(read_history(directory), load_whatif(other))
    pool = report.pools["default"]
    base, what = pool.baseline_queues, pool.whatif_queues
    # with reclaim (the recorded default): qa takes its 2 deserved GPUs back at once, qb loses 2 jobs
    assert (base["qb"].evictions, base["qa"].mean_wait_s, base["qa"].max_wait_s) == (2, 0.0, 0.0)
    assert {o.evictions[0][1] for o in pool.baseline.values() if o.evictions} == {"reclaim"}
    # allocate only: nothing is evicted; qa waits until qb's jobs end at t=1000
    assert (what["qb"].evictions, what["qa"].evictions) == (0, 0)
    assert what["qa"].mean_wait_s == what["qa"].max_wait_s == 1000.0 - ARRIVAL_A
    assert what["qa"].bound == 2 and what["qa"].pods == 2
    assert report.baseline_config != report.whatif_config
    changed = {before.key: (before.status, after.status if after else None) for before, after in pool.changed_pods()}
    assert changed["ml/a0"][1] == changed["ml/a1"][1] == "Succeeded"
    assert sorted(k for k, (b, a) in changed.items() if b == "Evicted") == sorted(
        o.key for o in pool.baseline.values() if o.evictions
    )


def test_whatif_cli_shows_evictions_and_wait_side_by_side(tmp_path: Path) -> None:
    directory, other = _history(tmp_path)
    _register()
    argv = ["replay", "--from-history", str(directory), "--config", str(other)]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") > 5}
    assert "0.0 | 900.0" in rows["qa"]  # mean wait of qa, baseline | what-if
    assert "2 | 0" in rows["qb"]  # evictions qb suffered
    as_json = CliRunner().invoke(app, ["replay", "--from-history", str(directory), "--config", str(other), "--json"])
    assert as_json.exit_code == 0, as_json.output
    pools = json.loads(as_json.output)["pools"]["default"]
    assert pools["baseline"]["qb"]["evictions"] == 2 and pools["whatif"]["qb"]["evictions"] == 0
    assert pools["whatif"]["qa"]["mean_wait_s"] == 900.0
