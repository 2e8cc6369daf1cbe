"""A processor started with ``parent_pid`` stops once that parent is gone (killed without any shutdown), so a
killed pipeline leaves no processor behind on a real broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames

LAUNCHER = """
import os, subprocess, sys, time
env = dict(os.environ, KAI_STREAM_PROCESSOR_PARENT_PID=str(os.getpid()))
child = subprocess.Popen([sys.executable, "-m", "kai_stream.streams"], env=env, stdin=subprocess.DEVNULL,
                         stdout=open(sys.argv[1], "ab"), stderr=subprocess.STDOUT, start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for an orphan reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _wait(condition: bool, pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _running(pid) == condition:
            return True
        time.sleep(0.2)
    return _running(pid) == condition


async def test_processor_stops_when_its_parent_is_killed(
    kafka_settings: KafkaSettings, topics: TopicNames, topic_prefix: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "KAI_STREAM_KAFKA_SESSION_TIMEOUT_MS": "2000",
        "KAI_STREAM_KAFKA_HEARTBEAT_INTERVAL_MS": "300",
        "KAI_STREAM_PROCESSOR_APP_ID": f"{topic_prefix}scheduler",
        "KAI_STREAM_PROCESSOR_TOPIC_PREFIX": topic_prefix,
        "KAI_STREAM_PROCESSOR_DATA_DIR": str(tmp_path / "faust"),
        "KAI_STREAM_HEALTH_ENABLED": "false",
    }
    log = tmp_path / "processor.log"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(log)], env=env, stdout=subprocess.PIPE, text=True
    )
    child = 0
    try:
        assert launcher.stdout is not None
        child = int(launcher.stdout.readline())
        time.sleep(5)
        assert _running(child), f"the processor stopped with its parent alive:\n{log.read_text()[-2000:]}"
        launcher.kill()
        launcher.wait()
        assert _wait(False, child, 30), f"the processor outlived its parent:\n{log.read_text()[-2000:]}"
        assert "parent process" in log.read_text()
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        if child and _running(child):
            os.kill(child, signal.SIGKILL)
