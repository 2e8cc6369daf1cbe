"""`kai-stream topics create`, `kai-stream broker` and `kai-stream binder` as a user runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

from typer.testing import CliRunner

import kai_stream.cli.binder
import kai_stream.cli.broker
import kai_stream.cli.topics  # noqa: F401
from kai_stream.cli import app
from kai_stream.settings import KafkaSettings

PROGRAM = (
    "import sys, kai_stream.cli.binder, kai_stream.cli.broker, kai_stream.cli.topics;"
    " from kai_stream.cli import app; sys.exit(app())"
)


def test_topics_create_twice_reports_created_then_exists(kafka_settings: KafkaSettings) -> None:
    prefix = f"cli{uuid.uuid4().hex[:6]}-"
    args = ["topics", "create", "--bootstrap-servers", kafka_settings.bootstrap_servers, "--prefix", prefix]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.output.count("created") == 4 and f"{prefix}decisions" in first.output
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0 and second.output.count("exists") == 4


def test_topics_check_passes_on_committed_schemas() -> None:
    result = CliRunner().invoke(app, ["topics", "check"])
    assert result.exit_code == 0 and "match" in result.output


def _run_until(argv: list[str], ready: str, timeout: float = 20) -> tuple[int, str]:
    env = {**os.environ, "KAI_STREAM_KAFKA_SESSION_TIMEOUT_MS": "2000", "KAI_STREAM_KAFKA_HEARTBEAT_INTERVAL_MS": "300"}
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if ready in line:
            break
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, "".join(lines) + out


def test_broker_command_runs_until_signalled_and_stops_cleanly() -> None:
    code, output = _run_until(["broker", "--memory"], "Ctrl-C")
    assert code == 0, output
    assert "broker ready: 127.0.0.1:" in output
    assert "topics created: bind-results, cluster-events, dead-letter, decisions" in output
    assert "broker stopped" in output


def test_binder_command_starts_and_stops_on_sigterm(kafka_settings: KafkaSettings) -> None:
    argv = ["binder", "--bootstrap-servers", kafka_settings.bootstrap_servers, "--api-url", "http://127.0.0.1:9",
            "--health-port", "0", "--topic-prefix", f"cli{uuid.uuid4().hex[:6]}-"]
    code, output = _run_until(argv, "binder: kafka=")
    assert code == 0, output
    assert f"kafka={kafka_settings.bootstrap_servers}" in output
