"""`kai-stream run --duration 20` (what `make run` starts): the demo pipeline schedules, binds, stops cleanly."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def test_run_for_twenty_seconds_binds_pods_and_stops_cleanly() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from kai_stream.cli import main; main()", "run", "--duration", "20", "--no-history",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=ROOT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    text = out.decode()
    assert proc.returncode == 0, text[-3000:]
    assert "stopped cleanly" in text
    bound = re.search(r"BindRequested (\d+).*binding POSTs (\d+)", text)
    assert bound is not None, text[-3000:]
    decided, posts = int(bound.group(1)), int(bound.group(2))
    # the demo asks for more than 16 GPUs and re-submits finished pods: more binds than fit at once
    assert decided > 16 and posts > 16
    assert posts <= decided
