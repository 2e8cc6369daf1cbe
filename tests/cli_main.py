"""The CLI run in-process for tests, as ``kai-stream ARGV``: ``sys.argv`` swapped in for the call
(``kai_argv``) and the exit code and captured output read back (``kai``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from kai_stream.cli import main


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
