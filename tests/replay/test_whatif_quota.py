"""What-if: raising a queue's GPU quota shortens its wait, shown in the report (API and CLI)."""

from __future__ import annotations

from pathlib import Path

from replay_manifests import NODE, pod, queue
from typer.testing import CliRunner

from kai_stream.cli import _register, app
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.manifests import load_scenario
from kai_stream.history.export import write_history
from kai_stream.history.reader import read_history
from kai_stream.replay.engine import run_engine
from kai_stream.replay.whatif import load_whatif, observed_only, run_whatif


def _history(tmp_path: Path) -> Path:
    pods = [pod(f"a-{i}", "team-a", 100, "build") for i in range(4)]
    scenario = "---".join([NODE, queue("team-a", 1), queue("team-b", 3), *pods])
    run = run_engine(load_scenario(scenario), SchedulerConfig())
    directory = tmp_path / "history"
    write_history(directory, [run.log])
    other = tmp_path / "more-quota.yaml"
    other.write_text(queue("team-a", 4))
    return directory


def test_raising_quota_shortens_wait(tmp_path: Path) -> None:
    directory = _history(tmp_path)
    history = read_history(directory)
    log = history.pools["default"]
    assert len(observed_only(log)) < len(log.events)  # outcomes and re-observations are dropped

    report = run_whatif(history, load_whatif(tmp_path / "more-quota.yaml"))
    pool = report.pools["default"]
    before, after = pool.baseline_queues["team-a"], pool.whatif_queues["team-a"]
    # quota 1 and non-preemptible: one 100 s pod at a time (waits 0, 100, 200, 300); quota 4: all at once
    assert before.mean_wait_s == 150.0 and before.max_wait_s == 300.0
    assert after.mean_wait_s == 0.0 and after.max_wait_s == 0.0
    assert before.pods == after.pods == 4
    waited = {o.key for o in pool.baseline.values() if o.bound_at}
    assert len(waited) == 3
    assert {b.key for b, _ in pool.changed_pods()} == waited


def test_whatif_cli_prints_side_by_side(tmp_path: Path) -> None:
    directory = _history(tmp_path)
    _register()
    result = CliRunner().invoke(
        app,
        ["replay", "--from-history", str(directory), "--config", str(tmp_path / "more-quota.yaml")],
        env={"COLUMNS": "160"},
    )
    assert result.exit_code == 0, result.output
    assert "team-a" in result.output and "150.0 | 0.0" in result.output
    assert "3 pod(s) with a different outcome" in result.output
