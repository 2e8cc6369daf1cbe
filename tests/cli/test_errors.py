"""The command line's error boundary: each ordinary mistake ends in one line on stderr that names the file, field,
flag or variable at fault, a non-zero exit and no traceback; ``--debug`` lets the traceback through."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kai_stream.cli import main
from tests.cli_main import kai, kai_argv

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo.yaml"


def one_line(code: int, err: str, *names: str) -> None:
    assert code != 0
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for name in names:
        assert name in lines[0], (name, err)


@pytest.fixture
def bad_config(tmp_path: Path) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text("run:\n  foo: 1\n")
    return path


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "binary.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    return path


def test_run_config_missing(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = kai(["run", "--config", "missing.yaml"], capsys)
    one_line(code, err, "missing.yaml", "No such file")


def test_run_and_processor_config_unknown_key(bad_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "processor", "simulate"):
        extra = [str(DEMO)] if command == "simulate" else []
        code, _, err = kai([command, "--config", str(bad_config), *extra], capsys)
        one_line(code, err, "cfg.yaml", "run")


def test_run_scenario_kind_typo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "typo.yaml"
    scenario.write_text(DEMO.read_text().replace("kind: Queue", "kind: Queeu"))
    code, _, err = kai(["run", "--scenario", str(scenario)], capsys)
    one_line(code, err, "typo.yaml", "Queeu")


def test_binary_scenario(binary: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["run", "--scenario", str(binary)], ["simulate", str(binary)]):
        code, _, err = kai(argv, capsys)
        one_line(code, err, "binary.yaml", "not a text file")


def test_unreachable_kafka(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for argv in (["tail", "decisions"], ["replay"], ["audit", "verify"]):
        code, _, err = kai([*argv, "--bootstrap-servers", f"127.0.0.1:{port}"], capsys)
        one_line(code, err, f"127.0.0.1', {port}")


def test_invalid_kafka_setting_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAI_STREAM_KAFKA_SECURITY_PROTOCOL", "TLS")
    code, _, err = kai(["tail", "decisions", "--limit", "1", "--bootstrap-servers", "127.0.0.1:1"], capsys)
    one_line(code, err, "KAI_STREAM_KAFKA_SECURITY_PROTOCOL", "'TLS'")


def test_no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = kai(["connector", "--bootstrap-servers", "127.0.0.1:1"], capsys)
    one_line(code, err, "kubeconfig", "--kubeconfig")


def test_trace_cluster_with_pods(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("submit,duration,gpus\n0,10,1\n5,10,2\n")
    argv = ["trace", "run", str(trace), "--cluster", str(DEMO), "--history", str(tmp_path / "h")]
    code, _, err = kai(argv, capsys)
    one_line(code, err, "demo.yaml", "Pod demo/team-a-job-00")


def test_debug_shows_the_traceback() -> None:
    with kai_argv(["--debug", "run", "--config", "missing.yaml"]), pytest.raises(ValueError, match=r"missing\.yaml"):
        main()


def test_version_help_completion_and_module(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--version"], ["-h"], ["replay", "-h"], ["tail", "decisions", "-h"]):
        with kai_argv(argv), pytest.raises(SystemExit) as exit_info:
            main()
        assert exit_info.value.code in (0, None)
        out = capsys.readouterr().out
        assert "<bool>" not in out
        if argv == ["--version"]:
            assert out.startswith("kai-stream ")
        elif argv == ["-h"]:
            assert "--install-completion" in out and "--debug" in out
    module = subprocess.run(
        [sys.executable, "-m", "kai_stream", "--version"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert module.returncode == 0 and module.stdout.startswith("kai-stream "), module.stderr


def test_processor_outside_the_repository_creates_its_data_dir(tmp_path: Path, broker: str) -> None:
    """faust creates only the last level of its data dir: the processor must not need `.kai-stream/` to exist."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kai_stream", "processor", "--bootstrap-servers", broker],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "KAI_STREAM_HEALTH_PORT": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / ".kai-stream" / "faust").is_dir() and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert (tmp_path / ".kai-stream" / "faust").is_dir(), err
    assert "FileNotFoundError" not in err


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("overQuotaWeight: 2", "overQuotaWieght: 2", "spec.resources.gpu.overQuotaWieght"),
        ("schedulerName: kai-scheduler", "schedulerNmae: kai-scheduler", "spec.schedulerNmae"),
        ("limits:", "limtis:", "spec.containers[0].resources.limtis"),
    ],
)
def test_manifest_typos_name_the_field(
    old: str, new: str, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "typo.yaml"
    scenario.write_text(DEMO.read_text().replace(old, new, 1))
    for argv in (["simulate", str(scenario)], ["run", "--scenario", str(scenario)], ["cluster", "-s", str(scenario)]):
        code, _, err = kai(argv, capsys)
        one_line(code, err, "typo.yaml", field, "unknown field")
    code, _, _ = kai(["simulate", "--lenient", "--json", str(scenario)], capsys)
    assert code == 0


def test_empty_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "empty.yaml"
    scenario.write_text("")
    for argv in (["simulate", str(scenario)], ["run", "--scenario", str(scenario)], ["cluster", "-s", str(scenario)]):
        code, _, err = kai(argv, capsys)
        one_line(code, err, "empty.yaml", "no Kubernetes objects")


def test_config_unknown_processor_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("processor:\n  foo: 1\n")
    for command in ("run", "processor"):
        code, _, err = kai([command, "--config", str(path)], capsys)
        one_line(code, err, "cfg.yaml", "processor")


def test_processor_without_a_broker(capsys: pytest.CaptureFixture[str]) -> None:
    """faust reported it as a 37-line crash."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, _, err = kai(["processor", "--bootstrap-servers", f"127.0.0.1:{port}"], capsys)
    one_line(code, err, "cannot reach Kafka", f"127.0.0.1', {port}")


def test_processor_health_port_taken(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """faust reported it as an 18-line crash once it had reached the broker; now it is named before."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("KAI_STREAM_HEALTH_PORT", str(port))
        code, _, err = kai(["processor", "--bootstrap-servers", "127.0.0.1:1"], capsys)
    one_line(code, err, f"health port 127.0.0.1:{port}", "KAI_STREAM_HEALTH_PORT")


def test_run_secure_needs_the_kafka_engine_and_no_outside_broker(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = kai(["run", "--secure"], capsys)
    one_line(code, err, "--secure", "--engine kafka")
    code, _, err = kai(["run", "--secure", "--engine", "kafka", "--bootstrap-servers", "127.0.0.1:1"], capsys)
    one_line(code, err, "--secure", "KAI_STREAM_KAFKA_")
