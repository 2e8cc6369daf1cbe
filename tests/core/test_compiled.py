"""The compiled scheduler (setup.py: mypyc) decides exactly as its sources do, which the rest of the in-process
tests run (tests/conftest.py): both are run in fresh interpreters over the inputs of compiled_digest.py, every
scenario file, bench_cycle's clusters and a slice of a real trace, and every digest must agree. The installed
build must be the compiled one, unless ``KAI_STREAM_NO_COMPILE`` asks for the sources alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _digests(*flags: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.core.compiled_digest", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_compiled_scheduler_decides_as_its_sources() -> None:
    sources = _digests("--sources")
    installed = _digests()
    assert sources["compiled"] is False
    wanted = os.environ.get("KAI_STREAM_NO_COMPILE", "") in ("", "0")
    assert installed["compiled"] is wanted, "the installed scheduler is not the compiled build (see setup.py)"
    assert len(sources["digests"]) >= 50
    differing = sorted(k for k in sources["digests"] if installed["digests"].get(k) != sources["digests"][k])
    assert differing == [], (
        f"the compiled scheduler decides otherwise on {differing} (built from older sources? `make` rebuilds it)"
    )
    assert installed["digests"].keys() == sources["digests"].keys()
