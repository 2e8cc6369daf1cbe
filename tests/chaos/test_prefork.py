"""A supervised worker killed with SIGKILL is forked again at once, with its imports done (no module imported
again in the new worker); SIGTERM to the supervisor stops the worker and ends the supervisor with its code; a
worker that keeps failing is forked again at once the first time, then after a growing back-off."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kai_stream.prefork import exit_code, worker_pid

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import json  # imported once, by the supervisor
    from kai_stream.prefork import supervise

    out = Path(sys.argv[1])
    fail = sys.argv[2] == "fail"

    def work():
        with out.open("a") as f:
            f.write(f"{os.getpid()} {time.monotonic()} {'json' in sys.modules}\\n")
        if fail:
            raise RuntimeError("boom")
        time.sleep(60)

    sys.exit(supervise("test", work, stable_s=5.0, initial_backoff_s=0.4))
    """
)


def _start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[bytes], Path]:
    out = tmp_path / "workers"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(out), mode], stderr=subprocess.PIPE)
    return proc, out


def _workers(out: Path, at_least: int, timeout_s: float = 30.0) -> list[list[str]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = [line.split() for line in out.read_text().splitlines()] if out.exists() else []
        if len(lines) >= at_least:
            return lines
        time.sleep(0.02)
    raise AssertionError(f"fewer than {at_least} workers started: {out.read_text() if out.exists() else ''}")


def test_a_killed_worker_is_forked_again_at_once_and_sigterm_stops_both(tmp_path: Path) -> None:
    proc, out = _start(tmp_path, "run")
    try:
        first = _workers(out, 1)[0]
        assert worker_pid(proc.pid) == int(first[0])
        killed_at = time.monotonic()
        os.kill(int(first[0]), signal.SIGKILL)
        second = _workers(out, 2)[1]
        assert second[0] != first[0]
        assert float(second[1]) - killed_at < 1.0  # no interpreter start, no imports
        assert second[2] == "True"  # the module came with the fork
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM
        assert worker_pid(proc.pid) is None
        assert not Path(f"/proc/{second[0]}").exists()  # stopped and reaped
    finally:
        proc.kill()
        proc.wait()


def test_a_crash_loop_backs_off(tmp_path: Path) -> None:
    proc, out = _start(tmp_path, "fail")
    try:
        starts = [float(line[1]) for line in _workers(out, 5)]
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert gaps[0] < 0.4 and gaps[1] >= 0.4 and gaps[2] >= 0.8 and gaps[3] >= 1.6, gaps
    finally:
        proc.kill()
        proc.wait()
    assert b"worker exited with 1" in (proc.stderr.read() if proc.stderr is not None else b"")


def test_exit_code_names_the_signal() -> None:
    assert exit_code(signal.SIGKILL) == 128 + signal.SIGKILL
    assert exit_code(3 << 8) == 3
