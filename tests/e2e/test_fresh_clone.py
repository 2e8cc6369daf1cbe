"""A newcomer's first hour, as they live it: a fresh `git clone` of this checkout's HEAD, `make run` there (which
bootstraps the clone's own .venv), decisions on the screen, Ctrl-C (SIGINT to the whole process group, as a
terminal sends it), then the commands `make run` printed when it stopped (replay, audit verify, explain, analyze,
tail) run from the clone with its own .venv: each exits 0 with no traceback, and replay rebuilds every decision.

The clone installs with ``KAI_STREAM_NO_COMPILE=1`` (the sources, no mypyc build) to keep the test within minutes on
a 2-core machine; pip's wheel cache is used as a newcomer's would be. The compiled install is timed by hand
(README, "Two commands")."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP_S = 900.0
"""The venv bootstrap: ``pip install`` of every dependency, from pip's cache when it has them."""
DECISIONS_S = 180.0
"""From the pipeline's start until BindRequested decisions show."""
DECISION = re.compile(r"^decision (BindRequested)\s+pool=\S+ pod=(\S+/\S+) node=(\S+)", re.MULTILINE)


def _clean_env() -> dict[str, str]:
    """This environment minus what would make the clone use this checkout or its virtualenv."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith(("KAI_STREAM_", "PYTEST"))
    }
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir)
    env["KAI_STREAM_NO_COMPILE"] = "1"
    env["COLUMNS"] = "120"
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("newcomer") / "kai-stream"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(where)], check=True, timeout=300)
    assert not (where / ".venv").exists()
    return where


def _read_until(proc: subprocess.Popen[str], wanted: int, deadline: float) -> str:
    """Lines of ``proc``'s stdout until ``wanted`` BindRequested decisions have shown, or the deadline."""
    assert proc.stdout is not None
    lines: list[str] = []
    seen = 0
    os.set_blocking(proc.stdout.fileno(), False)
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        if not line:
            time.sleep(0.2)
            continue
        lines.append(line)
        if DECISION.match(line):
            seen += 1
            if seen >= wanted:
                break
    return "".join(lines)


def _ctrl_c(proc: subprocess.Popen[str]) -> str:
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), True)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"make run did not stop within 120 s of Ctrl-C: {out[-3000:]}")
    return out


def test_make_run_then_the_printed_next_steps_from_a_fresh_clone(clone: Path) -> None:
    env = _clean_env()
    began = time.monotonic()
    proc = subprocess.Popen(
        ["make", "run"], cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    try:
        live = _read_until(proc, 20, began + BOOTSTRAP_S + DECISIONS_S)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    shown = time.monotonic() - began
    time.sleep(3.0)  # what a newcomer does: watch a moment, then Ctrl-C
    out = live + _ctrl_c(proc)
    print(f"fresh clone: make run showed 20 binds after {shown:.0f} s (venv bootstrap included)")

    assert (clone / ".venv" / "bin" / "kai-stream").exists(), "make run bootstrapped no .venv in the clone"
    binds = DECISION.findall(out)
    assert len(binds) >= 20, f"no live decisions in {shown:.0f} s: {out[-5000:]}"
    nodes = {d["metadata"]["name"] for d in yaml.safe_load_all((clone / "examples" / "demo.yaml").read_text())
             if d and d.get("kind") == "Node"}
    assert all(pod.startswith("demo/") and node in nodes for _, pod, node in binds), (binds[:5], nodes)
    # Ctrl-C reaches make too, which then dies of it; make reports a recipe that failed ("Error N") or was killed
    # ("Interrupt"), so its silence says kai-stream exited 0
    assert proc.returncode in (0, -signal.SIGINT), proc.returncode
    assert "make: ***" not in out, out[-3000:]
    assert "Traceback" not in out, out[-5000:]
    assert "stopped cleanly" in out, out[-3000:]
    summary = re.search(r"BindRequested (\d+).*\| binding POSTs (\d+)", out)
    assert summary is not None, out[-3000:]
    live_binds = int(summary.group(1))  # counted when it stopped; decisions shown while stopping come on top
    assert live_binds >= 20 and int(summary.group(2)) >= 16, summary.group(0)

    steps = re.findall(r"^  (\.venv/bin/kai-stream [^#\n]+?)\s+#", out, re.MULTILINE)
    assert [s.split()[1] for s in steps] == ["replay", "audit", "explain", "analyze", "tail"], out[-2000:]
    for step in steps:
        done = subprocess.run(
            shlex.split(step), cwd=clone, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert done.returncode == 0, f"{step}: rc {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        assert "Traceback" not in done.stdout + done.stderr, f"{step}: {done.stderr[-3000:]}"
        assert done.stdout.strip(), f"{step} printed nothing"

    replayed = subprocess.run(
        [".venv/bin/kai-stream", "replay", "--json"], cwd=clone, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    report = orjson.loads(replayed.stdout)
    assert report["divergent"] == 0 and not report["errors"] and not report["malformed"], report
    assert report["identical"] == report["decisions"] >= live_binds, (report, live_binds)
    explained = next(s for s in steps if s.split()[1] == "explain").split()[2]
    assert explained in {pod for _, pod, _ in binds}, (explained, binds[:5])
