"""The processes of one scheduler under test: spawned with their output in a log file each, checked for early
exits, stopped in reverse order (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kai_stream.broker import stop_process


class ComponentExited(RuntimeError):
    """A component of the scheduler under test exited while it should be running."""


class Processes:
    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._adopted: dict[str, int] = {}

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.logdir.mkdir(parents=True, exist_ok=True)
        with open(self.logdir / f"{name}.log", "ab") as log:
            self._procs[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **(env or {})})

    def adopt(self, name: str, pid: int | None) -> None:
        """Count a process someone else started (the embedded broker) among the measured ones."""
        if pid is not None:
            self._adopted[name] = pid

    def pids(self) -> dict[str, int]:
        return {**self._adopted, **{name: proc.pid for name, proc in self._procs.items()}}

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.logdir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def check(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise ComponentExited(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    def stop(self) -> None:
        for name in reversed(list(self._procs)):
            stop_process(self._procs.pop(name), grace_s=15)
