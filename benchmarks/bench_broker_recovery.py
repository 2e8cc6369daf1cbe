"""Recovery after kill -9 of the Apache Kafka broker (``--engine kafka``), taken apart phase by phase.

Everything real, every component its own process as ``bench_chaos.py`` runs them: the embedded Apache Kafka
broker (KRaft, its log on disk), the simulated Kubernetes API (in this process), and the connector, processor and
binder as ``kai-stream`` processes (``--supervise``: under ``kai_stream/prefork.py``). The cluster is
``bench_recovery.py``'s (one pool per partition, 8 pools); ``--pods`` pods are created and bound first, so the
broker's logs, offsets and transactions are not empty when it dies.

Per kill (``--kills`` times): the broker is killed with SIGKILL and started again at once on its port and data
directory (``Pipeline.restart_broker``), then one pod per pool is created and the recovery time is from the kill
to the last of those pods' binding POST. The phases, in seconds after the kill:

- ``port``: the new broker accepts TCP connections (polled here);
- ``logs loaded``: the broker's ``LogManager`` loaded (recovered, after an unclean shutdown) its logs;
- ``ready``: a metadata request lists the broker (``KafkaBroker.start`` returns); ``refused registrations``:
  how often the controller refused the new broker's registration while the dead one's session was alive;
- ``broker CPU-s until ready``: what the new broker's JVM used until then (the figure the machine's load does not
  stretch); ``component CPU-s until ready``: what the connector, processor and binder processes used meanwhile;
- ``processor group`` / ``binder group``: the group is Stable with a member again (``describe_groups``);
- ``bound``: the last pod of the wave bound.

The broker logs at INFO (``KAI_STREAM_KAFKA_LOG_LEVEL``) for the ``logs loaded`` stamp. The baseline printed
with the figures is the cold first start of a broker of the same kind in the same run (format + JVM start until it
lists itself): a restart's ``ready`` divided by it.

Usage: ``python benchmarks/bench_broker_recovery.py [--kills 3] [--pods 200] [--supervise]``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import re
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_recovery import _pod, _wave, cluster_yaml, pools
from kubernetes_asyncio import client

from kai_stream.connectors.simcluster.client import api_client
from kai_stream.kafka import make_admin
from kai_stream.kafka_engine import LOG_LEVEL_ENV, KafkaBroker
from kai_stream.pipeline import Pipeline, PipelineOptions

_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
_LOADED = re.compile(r"Loaded \d+ logs in (\d+)ms")
REFUSED = "DUPLICATE_BROKER_REGISTRATION"
GPUS_PER_POOL = 64
"""``bench_recovery.cluster_yaml``'s node per pool."""
COUNTS = ("refused registrations", "log loading (ms)", "broker CPU-s until ready", "component CPU-s until ready")


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


async def until_accepts(port: int, since: float) -> float:
    while not await asyncio.to_thread(accepts, port):
        await asyncio.sleep(0.05)
    return time.monotonic() - since


async def until_stable(pipeline: Pipeline, group: str, since: float, timeout_s: float = 300.0) -> float | None:
    """Seconds from ``since`` until ``group`` is Stable with a member (None if not within ``timeout_s``)."""
    assert pipeline.kafka is not None
    deadline = time.monotonic() + timeout_s
    admin = make_admin(pipeline.kafka)
    await admin.start()
    try:
        while time.monotonic() < deadline:
            try:
                described: Any = await admin.describe_consumer_groups([group])
                groups = [g for response in described for g in response.groups]
                # (error, id, state, protocol type, protocol, members)
                if any(g[2] == "Stable" and g[5] for g in groups):
                    return time.monotonic() - since
            except Exception:  # the coordinator is loading: ask again
                pass
            await asyncio.sleep(0.1)
        return None
    finally:
        await admin.close()


def tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds (user + system) used so far by the processes ``roots`` and their descendants."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        used[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    mine = set(roots)
    while grown := {pid for pid, parent in parents.items() if parent in mine and pid not in mine}:
        mine |= grown
    return sum(used.get(pid, 0.0) for pid in mine)


def log_stamp(line: str) -> float | None:
    found = _STAMP.match(line)
    if found is None:
        return None
    return datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def broker_phases(log: str, killed_at: float) -> dict[str, float]:
    """From the restarted broker's log: when its logs were loaded (seconds after the kill) and how many of its
    registrations the controller refused."""
    phases: dict[str, float] = {"refused registrations": float(log.count(REFUSED) // 2)}  # logged by both roles
    for line in log.splitlines():
        loaded = _LOADED.search(line)
        if loaded is not None and (at := log_stamp(line)) is not None:
            phases["logs loaded"] = at - killed_at
            phases["log loading (ms)"] = float(loaded.group(1))
    return phases


async def cold_start_s() -> float:
    """A fresh broker's first start (format + JVM start until it lists itself), stopped again."""
    with tempfile.TemporaryDirectory(prefix="kai-stream-cold-") as tmp:
        broker = KafkaBroker(memory=False, data_dir=tmp)
        started = time.monotonic()
        await asyncio.to_thread(broker.start)
        took = time.monotonic() - started
        await asyncio.to_thread(broker.stop)
        return took


async def fill(core: client.CoreV1Api, pipeline: Pipeline, pods: int) -> None:
    names = [f"load-{i}" for i in range(pods)]
    create: Any = core.create_namespaced_pod
    for i, name in enumerate(names):
        await create("bench", _pod(name, pools()[i % len(pools())]))
    deadline = time.monotonic() + 600
    while not set(names) <= {b.name for b in pipeline.cluster.bindings if b.code == 201}:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the {pods} load pods were not bound in 600 s")
        await asyncio.sleep(0.2)


async def one_kill(pipeline: Pipeline, core: client.CoreV1Api, i: int, keep: Path | None) -> dict[str, float]:
    assert pipeline.kafka is not None
    port = int(pipeline.kafka.bootstrap_servers.rsplit(":", 1)[1])
    assert pipeline.broker is not None and pipeline.broker.pid is not None
    components = [pid for name, pid in pipeline.component_pids().items() if name != "broker"]
    cpu_before = tree_cpu_s(components)
    killed_at, started = time.time(), time.monotonic()
    os.kill(pipeline.broker.pid, signal.SIGKILL)
    await asyncio.to_thread(pipeline.broker.stop)  # reaped: the port is polled once the old listener is gone
    port_task = asyncio.create_task(until_accepts(port, started))
    await pipeline.restart_broker(kill=True)
    phases = {"ready": time.monotonic() - started, "port": await port_task}
    phases["component CPU-s until ready"] = tree_cpu_s(components) - cpu_before
    assert pipeline.broker.pid is not None
    phases["broker CPU-s until ready"] = tree_cpu_s([pipeline.broker.pid])
    processor, binder = await asyncio.gather(
        until_stable(pipeline, pipeline.processor_app_id, started), until_stable(pipeline, pipeline.binder_group_id,
                                                                                 started))
    await _wave(pipeline, core, f"broker-{i}", timeout_s=600)
    phases["bound"] = time.monotonic() - started
    phases.update({k: v for k, v in (("processor group", processor), ("binder group", binder)) if v is not None})
    assert isinstance(pipeline.broker, KafkaBroker) and pipeline.broker.log_path is not None
    log = pipeline.broker.log_path.read_text(errors="replace")
    phases.update(broker_phases(log, killed_at))
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"broker-{i}.log").write_text(log)
    return phases


async def run(args: argparse.Namespace) -> int:
    os.environ[LOG_LEVEL_ENV] = "info"
    load = [os.getloadavg()[0]]
    cold = await cold_start_s()
    print(f"baseline: a fresh broker's cold start (format + JVM until it lists itself) {cold:.2f} s, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    results: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="kai-stream-brokerrec-") as tmp:
        scenario = Path(tmp) / "cluster.yaml"
        scenario.write_text(cluster_yaml())
        options = PipelineOptions(
            scenario=scenario, engine="kafka", durable=True, data_dir=Path(tmp) / "data", tick_interval_s=0.5,
            binder_subprocess=True, connector_subprocess=True, tail=False, supervise=args.supervise,
        )
        async with Pipeline(options) as pipeline, api_client(pipeline.cluster.url or "") as api:
            core = client.CoreV1Api(api)
            await _wave(pipeline, core, "warm-up", timeout_s=600)
            await fill(core, pipeline, args.pods)
            for i in range(args.kills):
                await asyncio.sleep(args.settle)
                load.append(os.getloadavg()[0])
                phases = await one_kill(pipeline, core, i, args.broker_logs)
                results.append(phases)
                order = sorted(phases.items(), key=lambda kv: (kv[0] in COUNTS, kv[1]))
                shown = [f"{k} {v:.2f}" if k not in COUNTS[:2] else f"{k} {v:.0f}" for k, v in order]
                print(f"broker kill {i} (load {load[-1]:.1f}): " + ", ".join(shown), flush=True)
            if args.log is not None:
                args.log.write_text(pipeline.processor_output(None))
    bound = [r["bound"] for r in results]
    ready = [r["ready"] for r in results]
    jvm = [r["broker CPU-s until ready"] for r in results]
    print(f"broker kill -9 (kafka, {args.pods} pods, supervise={args.supervise}): recovery p50 "
          f"{statistics.median(bound):.2f} s {[round(v, 2) for v in bound]}, broker ready p50 "
          f"{statistics.median(ready):.2f} s ({statistics.median(ready) / cold:.2f}x the cold start, {cold:.2f} s); "
          f"broker CPU-s until ready p50 {statistics.median(jvm):.2f}; load average {min(load):.1f}-{max(load):.1f} "
          "(2 cores)")
    return 0 if statistics.median(bound) <= args.target else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--pods", type=int, default=200, help="pods created and bound before the first kill")
    parser.add_argument("--supervise", action="store_true", help="components run under kai_stream/prefork.py")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between a recovery and the next kill")
    parser.add_argument("--log", type=Path, help="write the components' output (their log) to this file")
    parser.add_argument("--broker-logs", type=Path, help="keep each restarted broker's log in this directory")
    parser.add_argument("--target", type=float, default=5.0, help="exit 1 when the recovery p50 is above it")
    args = parser.parse_args()
    room = GPUS_PER_POOL * len(pools()) - len(pools()) * (args.kills + 1)
    if args.pods > room:
        parser.error(f"--pods {args.pods}: the cluster has room for {room} pods besides the waves")
    sys.exit(asyncio.run(_main(args)))


async def _main(args: argparse.Namespace) -> int:
    """``run``, cancelled (so every process it started is stopped) on SIGTERM."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await run(args)


if __name__ == "__main__":
    main()
