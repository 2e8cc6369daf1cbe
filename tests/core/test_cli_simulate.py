"""`kai-stream simulate`: JSON contract, rich table, clear failure on a bad scenario or config."""

from __future__ import annotations

from pathlib import Path

import orjson
from typer.testing import CliRunner

from kai_stream.cli import _register, app

_register()
EXAMPLES = Path(__file__).parents[2] / "examples"
runner = CliRunner()


def test_json_contract_and_determinism() -> None:
    args = ["simulate", str(EXAMPLES / "gang-and-fractions.yaml"), "--json"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert runner.invoke(app, args).stdout == first.stdout
    result = orjson.loads(first.stdout)
    assert set(result) == {"pods", "queues", "decisions"}
    pod = result["pods"]["ml/notebook-0"]
    assert set(pod) == {"status", "queue", "node", "gpu_indices"}
    assert pod["status"] == "Running" and isinstance(pod["gpu_indices"], list)
    assert result["pods"]["ml/train-big-0"]["status"] == "Pending"
    assert set(result["queues"]["default-queue"]) == {"fair_share", "allocated"}
    assert set(result["queues"]["default-queue"]["fair_share"]) == {"gpu", "cpu", "memory"}
    types = {d["type"] for d in result["decisions"]}
    assert {"BindRequested", "PodPending"} <= types
    assert all(d["config_hash"] and d["decision_id"] for d in result["decisions"])


def test_table_output() -> None:
    out = runner.invoke(app, ["simulate", str(EXAMPLES / "fair-share.yaml")])
    assert out.exit_code == 0, out.output
    assert "team-a" in out.stdout and "Running" in out.stdout


def test_spread_config_changes_placement(tmp_path: Path) -> None:
    config = tmp_path / "spread.yaml"
    config.write_text("placement: {gpu: spread}\n")
    scenario = str(EXAMPLES / "gang-and-fractions.yaml")
    packed = orjson.loads(runner.invoke(app, ["simulate", scenario, "--json"]).stdout)
    spread = orjson.loads(runner.invoke(app, ["simulate", scenario, "--json", "--config", str(config)]).stdout)
    assert packed["pods"] != spread["pods"]


def test_bad_scenario_exits_nonzero_with_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: q}\nspec: {resources: {gpu: {quota: -3}}}\n"
    )
    out = runner.invoke(app, ["simulate", str(bad)])
    assert out.exit_code == 2
    assert "spec.resources.gpu.quota" in out.output


def test_bad_config_exits_nonzero(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("placement: {gpu: sideways}\n")
    out = runner.invoke(app, ["simulate", str(EXAMPLES / "fair-share.yaml"), "--config", str(config)])
    assert out.exit_code == 2
    assert "placement.gpu" in out.output


def test_unsettled_run_warns(tmp_path: Path) -> None:
    out = runner.invoke(app, ["simulate", str(EXAMPLES / "fair-share.yaml"), "--json", "--cycles", "1"])
    assert out.exit_code == 0
    assert "still changing after 1 cycles" in out.stderr
    settled = runner.invoke(app, ["simulate", str(EXAMPLES / "fair-share.yaml"), "--json"])
    assert "still changing" not in settled.stderr
