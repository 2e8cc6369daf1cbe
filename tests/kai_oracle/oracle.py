"""KAI Scheduler's own fair-share simulators as a test oracle, built from the Go module pinned in ``go/go.mod``
(``github.com/NVIDIA/KAI-scheduler``) into ``~/.cache/kai-stream/bin`` like the control plane's binaries
(``kai_stream.connectors.apiserver.build``): nothing of KAI's source is kept here.

* ``cmd/fairshare-simulator``: an HTTP service (``POST /simulate``) that runs KAI's ``resource_division``
  (one level of sibling queues, ``kValue`` 0) on the queues and total it is given and answers each queue's fair
  share per resource. ``FairshareSimulator`` starts it on a free loopback port.
* ``cmd/time-aware-simulator``: KAI's scheduler, binder and controllers against an envtest control plane (the
  fixture's etcd and kube-apiserver binaries), a fake usage database fed once per 10 ms cycle, and a CSV of
  each queue's allocation and fair share per cycle. It must run from its own directory in the module (it reads
  ``../../deployments/kai-scheduler/crds``).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kai_stream.broker import free_port
from kai_stream.connectors.apiserver import build

MODULE = Path(__file__).resolve().parent / "go"
KAI = "github.com/NVIDIA/KAI-scheduler"
FAIRSHARE = build.GoTool("kai-fairshare-simulator", f"{KAI}/cmd/fairshare-simulator", MODULE)
TIME_AWARE = build.GoTool("kai-time-aware-simulator", f"{KAI}/cmd/time-aware-simulator", MODULE)


def module_dir() -> Path:
    return build.go_module_dir(KAI, MODULE)


class FairshareSimulator:
    """A running ``fairshare-simulator``; ``simulate`` posts one request and returns its answer."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process, self.port = process, port

    def simulate(self, total: dict[str, float], queues: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
        body = json.dumps({"totalResource": total, "queues": queues}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/simulate", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, dict[str, float]] = json.loads(response.read())
        return answer


@contextlib.contextmanager
def fairshare_simulator(timeout_s: float = 30.0) -> Iterator[FairshareSimulator]:
    binary = build.ensure_go_tool(FAIRSHARE)
    port = free_port()
    process = subprocess.Popen([str(binary), f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"fairshare-simulator exited {process.returncode}: {process.stderr!r}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/simulate", timeout=1)
            except urllib.error.HTTPError:
                break  # 405 to a GET: it serves
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield FairshareSimulator(process, port)
    finally:
        process.terminate()
        process.wait(timeout=10)


def run_time_aware(config: dict[str, Any], timeout_s: float = 600.0) -> list[dict[str, str]]:
    """Run ``time-aware-simulator`` on ``config`` (its YAML keys) and return its CSV rows."""
    binary = build.ensure_go_tool(TIME_AWARE)
    etcd, apiserver = build.ensure_go_tool(build.ETCD), build.ensure_go_tool(build.KUBE_APISERVER)
    with tempfile.TemporaryDirectory(prefix="kai-time-aware-") as tmp:
        assets = Path(tmp) / "assets"
        assets.mkdir()
        (assets / "etcd").symlink_to(etcd)
        (assets / "kube-apiserver").symlink_to(apiserver)
        config_file = Path(tmp) / "simulation.json"
        config_file.write_text(json.dumps(config))
        done = subprocess.run(
            [*build.NICE, str(binary), "-input", str(config_file), "-output", "-"],
            cwd=module_dir() / "cmd" / "time-aware-simulator",
            env={**os.environ, "KUBEBUILDER_ASSETS": str(assets)},
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"time-aware-simulator exited {done.returncode}: {done.stderr[-3000:]}")
    start = done.stdout.find("Time,") if "Time," in done.stdout else 0
    return list(csv.DictReader(io.StringIO(done.stdout[start:])))
