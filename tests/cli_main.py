"""The CLI run for tests as ``kai-stream ARGV``: in-process, with ``sys.argv`` swapped in for the call
(``kai_argv``) and the exit code and captured output read back (``kai``), or as ``python -m kai_stream`` in a
directory, required to succeed (``kai_process``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kai_stream.cli import main

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def kai_argv(argv: list[str]) -> Iterator[None]:
    """``sys.argv`` is ``kai-stream ARGV`` inside the block and what it was after it."""
    saved = sys.argv
    sys.argv = ["kai-stream", *argv]
    try:
        yield
    finally:
        sys.argv = saved


def kai(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``kai-stream ARGV`` in-process: its exit code, stdout and stderr."""
    with kai_argv(argv):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def kai_process(argv: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``python -m kai_stream ARGV`` in ``cwd`` from these sources (200 columns wide); fails the test unless it
    exits 0 within ``timeout_s``."""
    run = subprocess.run(
        [sys.executable, "-m", "kai_stream", *argv],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run
