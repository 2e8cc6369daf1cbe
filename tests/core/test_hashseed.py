"""Decisions do not depend on hash randomization: two processes with different PYTHONHASHSEED agree byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
SCRIPT = """
import sys, orjson
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.manifests import load_scenario
from kai_stream.simulate import simulate
out = [simulate(load_scenario(open(p).read()), SchedulerConfig()).to_json() for p in sys.argv[1:]]
sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_SORT_KEYS))
"""


def _run(seed: str) -> bytes:
    files = [str(ROOT / "examples" / "gang-and-fractions.yaml"), str(ROOT / "examples" / "fair-share.yaml")]
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *files], env=env, check=True, capture_output=True, cwd=ROOT
    ).stdout


def test_same_bytes_under_different_hash_seeds() -> None:
    first = _run("1")
    assert len(first) > 1000
    assert _run("4242") == first
