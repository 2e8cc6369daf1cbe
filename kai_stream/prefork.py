"""A component's worker restarted in milliseconds after it dies: ``supervise`` runs the worker in a process forked
from this one, after everything the worker needs was imported here, and forks it again at once when it dies
(SIGKILL, a crash, an exit with an error), instead of a fresh interpreter importing for seconds first.

The supervisor does nothing but wait: no event loop, no thread, no connection is made before the fork (the
modules imported here make none), so each worker starts as a fresh process would, with its imports done. What
the imports made is frozen out of the garbage collector (``gc.freeze``) before the fork and stays so in the
worker: no collection of the worker scans it (nor copies its shared pages), so the first full collection of a
worker that just started (the processor's, after its rebuild) does not pay for the imports.
SIGTERM or SIGINT to the supervisor is passed on to the worker, and the supervisor exits with the worker's code
once it stopped. A worker that dies soon after its start (within ``stable_s``) is forked again at once the first
time (a kill of a worker that had just come back is not a crash loop), then after a back-off from
``initial_backoff_s`` doubling up to ``max_backoff_s``, so a crash loop does not spin; a worker that lived
``stable_s`` resets it (3 s by default: its imports are done before the fork, so a worker that cannot start
fails within a second or two, and kills seconds apart are not a crash loop).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from types import FrameType

from kai_stream.core.gcpause import settle_heap

STABLE_S = 3.0
"""How long a worker must have lived for its death not to count towards a crash loop (``supervise``)."""
supervised = False
"""True in a worker forked by ``supervise`` (its parent is the supervisor, which watches its own parent)."""
supervisor_pid: int | None = None
"""In a worker forked by ``supervise``: its supervisor's pid (the worker's parent while the supervisor lives)."""
state_dir: str | None = None
"""Under ``supervise``: a directory the supervisor keeps for its workers, where a worker leaves what its successor
needs (``succession.py``: the consumer-group members to remove); removed when the supervisor ends."""


def _worker(run: Callable[[], object]) -> int:
    """Run ``run`` in the forked child; the exit code it ends with."""
    global supervised, supervisor_pid
    supervised = True
    supervisor_pid = os.getppid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    try:
        run()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def exit_code(status: int) -> int:
    """A ``waitpid`` status as a shell would report it (128 + signal for a killed process)."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def supervise(
    component: str,
    run: Callable[[], object],
    *,
    stop_with_parent: bool = False,
    stable_s: float = STABLE_S,
    initial_backoff_s: float = 0.5,
    max_backoff_s: float = 30.0,
) -> int:
    """Run ``run`` in a forked worker until it ends with code 0 or the supervisor is asked to stop; fork it
    again whenever it dies otherwise. Returns the last worker's exit code (call it in the process's main).
    ``stop_with_parent``: stop the worker (SIGTERM) and end once the supervisor's own parent is gone."""
    stopping: list[int] = []
    parent = os.getppid()
    child = 0

    def forward(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    global state_dir
    state_dir = tempfile.mkdtemp(prefix=f"kai-stream-{component}-")
    settle_heap()  # the imported modules' objects stay shared with the workers (copy-on-write pages untouched)
    quick_deaths = 0
    try:
        while True:
            sys.stdout.flush()
            sys.stderr.flush()
            started = time.monotonic()
            child = os.fork()
            if child == 0:
                os._exit(_worker(run))
            while True:
                pid, status = os.waitpid(child, os.WNOHANG)
                if pid:
                    break
                if stop_with_parent and os.getppid() != parent and not stopping:
                    forward(signal.SIGTERM, None)
                signal.sigtimedwait({signal.SIGCHLD}, 1.0)
            code = exit_code(status)
            child = 0
            if stopping or code == 0:
                return code
            lived = time.monotonic() - started
            quick_deaths = 0 if lived >= stable_s else quick_deaths + 1
            backoff = 0.0 if quick_deaths <= 1 else min(initial_backoff_s * 2 ** (quick_deaths - 2), max_backoff_s)
            print(f"{component}: worker exited with {code} after {lived:.1f}s; forked again in {backoff:.1f}s",
                  file=sys.stderr, flush=True)
            deadline = time.monotonic() + backoff
            while not stopping and time.monotonic() < deadline:
                time.sleep(min(0.1, deadline - time.monotonic()))
            if stopping:
                return code
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def worker_pid(supervisor_pid: int) -> int | None:
    """The worker a supervisor forked (its only child), read from ``/proc``; None when it has none now."""
    try:
        with open(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children") as children:
            pids = children.read().split()
    except OSError:
        return None
    return int(pids[0]) if pids else None
