"""A newcomer's path: `kai-stream run` records a history by default and says how to look at it; replay, audit
verify, explain, analyze and tail then read that history with no flags and exit 0; without one they say so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli_main import kai, kai_process


def test_run_records_a_history_the_next_commands_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS", raising=False)
    code, _, err = kai(["replay"], capsys)
    assert code != 0 and "no history at .kai-stream/history" in err and "kai-stream run" in err

    run = kai_process(["run", "--duration", "20"], tmp_path, 240)
    assert "recorded in .kai-stream/history" in run.stdout
    for command in ("replay", "audit verify", "explain", "analyze", "tail decisions"):
        assert f"python -m kai_stream {command}" in run.stdout, command
    pod = re.search(r"kai_stream explain (\S+)", run.stdout)
    assert pod is not None and pod.group(1).startswith("demo/")

    code, out, err = kai(["replay", "--json"], capsys)
    assert code == 0, err
    assert '"divergent":0' in out.replace(" ", "")
    code, out, err = kai(["audit", "verify", "--json"], capsys)
    assert code == 0 and '"ok":true' in out, err
    code, out, err = kai(["explain", pod.group(1), "--json"], capsys)
    assert code == 0 and pod.group(1).split("/")[1] in out, err
    code, out, err = kai(["analyze", "--json"], capsys)
    assert code == 0 and "team-a" in out, err
    code, out, err = kai(["tail", "decisions", "--kind", "bind", "--limit", "2", "--json"], capsys)
    assert code == 0 and out.count("BindRequested") == 2, err
