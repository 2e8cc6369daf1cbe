"""Replay rebuilds every decision of a recorded log byte for byte; a tampered decision is pinpointed by both
replay and the audit chain."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from kai_stream.audit import verify_chain
from kai_stream.cli import _register, app
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import BindRequested, PodPending
from kai_stream.core.manifests import load_scenario
from kai_stream.history.export import write_history
from kai_stream.history.reader import History, read_history
from kai_stream.replay.engine import EngineRun, run_engine
from kai_stream.replay.runner import replay_history
from kai_stream.replay.testing import ReplayMismatch, assert_replays_identically


def test_examples_exist() -> None:
    assert len(list((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))) >= 2


def test_scenario_logs_replay_identically_in_memory_and_from_parquet(scenario_run: EngineRun, tmp_path: Path) -> None:
    log = scenario_run.log
    assert any(isinstance(d, BindRequested) for d in log.decisions)
    report = assert_replays_identically(History({log.pool: log}, "engine"))
    assert report.identical == len(log.decisions) and report.events == len(log.events)

    write_history(tmp_path, [log], segment_records=7)
    from_disk = read_history(tmp_path)
    assert [e.model_dump() for e in from_disk.pools[log.pool].events] == [e.model_dump() for e in log.events]
    assert assert_replays_identically(tmp_path).identical == len(log.decisions)
    assert verify_chain(from_disk.pools[log.pool].decisions).ok


def _tamper(run: EngineRun, tmp_path: Path) -> tuple[int, Path]:
    log = run.log
    index = next(i for i, d in enumerate(log.decisions) if isinstance(d, BindRequested) and i > 0)
    original = log.decisions[index]
    assert isinstance(original, BindRequested)
    log.decisions[index] = original.model_copy(update={"node": original.node + "-forged"})
    write_history(tmp_path, [log])
    return index, tmp_path


def test_altered_decision_is_pinpointed_by_replay_and_audit(scenario_run: EngineRun, tmp_path: Path) -> None:
    index, directory = _tamper(scenario_run, tmp_path)
    history = read_history(directory)
    log = history.pools[scenario_run.log.pool]
    offset = log.decision_offsets[index]

    chain = verify_chain(log.decisions, offsets=log.decision_offsets)
    assert chain.broken is not None
    assert chain.broken.suspect_index == index and chain.broken.suspect_offset == offset
    assert chain.broken.index == index + 1

    report = replay_history(history)
    first = report.first_divergence
    assert first is not None and first.index == index and first.offset == offset
    assert [f for f, _, _ in first.fields] == ["node"]
    assert report.identical == len(log.decisions) - 2  # the forged one, and its successor's prev_hash
    with pytest.raises(ReplayMismatch, match=f"decisions offset {offset}"):
        assert_replays_identically(history)


def test_pending_reason_change_is_a_divergence() -> None:
    scenario = (Path(__file__).resolve().parents[2] / "examples" / "fair-share.yaml").read_text()
    log = run_engine(load_scenario(scenario), SchedulerConfig()).log
    pending = [i for i, d in enumerate(log.decisions) if isinstance(d, PodPending)]
    assert pending, "fair-share leaves pods pending on 16 GPUs"
    i = pending[-1]
    log.decisions[i] = log.decisions[i].model_copy(update={"reason": "forged"})
    report = replay_history(History({log.pool: log}, "engine"))
    assert report.first_divergence is not None and report.first_divergence.index == i


def test_cli_audit_and_replay_point_at_the_forged_decision(scenario_run: EngineRun, tmp_path: Path) -> None:
    index, directory = _tamper(scenario_run, tmp_path)
    offset = read_history(directory).pools[scenario_run.log.pool].decision_offsets[index]
    _register()
    runner = CliRunner()
    audit = runner.invoke(app, ["audit", "verify", "--from-history", str(directory), "--json"])
    assert audit.exit_code == 1, audit.output
    broken = orjson.loads(audit.output)["broken"]
    assert broken["suspect_offset"] == offset and broken["offset"] == offset + 1

    replayed = runner.invoke(app, ["replay", "--from-history", str(directory), "--json", "--no-progress"])
    assert replayed.exit_code == 1, replayed.output
    first = orjson.loads(replayed.output)["first_divergence"]
    assert first["offset"] == offset and [f["field"] for f in first["fields"]] == ["node"]

    human = runner.invoke(app, ["replay", "--from-history", str(directory), "--no-progress"])
    assert human.exit_code == 1 and "first divergence" in human.output and f"decisions offset {offset}" in human.output


def test_cli_replay_of_an_intact_history_exits_zero(scenario_run: EngineRun, tmp_path: Path) -> None:
    write_history(tmp_path, [scenario_run.log])
    _register()
    result = CliRunner().invoke(app, ["replay", "--from-history", str(tmp_path), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "identical" in result.output
    verified = CliRunner().invoke(app, ["audit", "verify", "--from-history", str(tmp_path)])
    assert verified.exit_code == 0 and "chain intact" in verified.output


def test_forked_replay_matches_sequential(scenario_run: EngineRun) -> None:
    log = scenario_run.log
    index = next(i for i, d in enumerate(log.decisions) if isinstance(d, BindRequested) and i > 0)
    forged = log.decisions[index]
    assert isinstance(forged, BindRequested)
    log.decisions[index] = forged.model_copy(update={"node": "elsewhere"})
    history = History({log.pool: log}, "engine")
    one, two = replay_history(history), replay_history(history, workers=2)
    assert (one.identical, one.events, one.decisions) == (two.identical, two.events, two.decisions)
    assert [(d.index, d.reason) for d in one.divergences] == [(d.index, d.reason) for d in two.divergences]
