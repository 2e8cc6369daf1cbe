"""One scheduler on one fresh fixture: etcd + kube-apiserver + KWOK, the scheduler's own objects (``prepare``), KAI's
PriorityClasses, the given objects but pods (nodes, queues, PodGroups), the scheduler's admission webhook (KAI's;
pods pass through it as in a cluster where KAI runs before they come), the given pods, then the scheduler's other
processes, which find the whole scenario at once; a warm-up pod must be bound before anything is measured.
``measure`` then creates the workload's pods (the steady phase at a fixed rate, then the burst at once), follows the
pod watch until every pod is bound, binds stall for ``settle_s`` or ``timeout_s`` passes, and reads the figures and
the processes' CPU and peak memory. A last list of the pods catches binds the watch did not deliver; they count as
bound at that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from benchmarks.peer_kai import kai
from benchmarks.peer_kai.api import Api
from benchmarks.peer_kai.processes import Processes
from benchmarks.peer_kai.procstat import Usage, UsageMeter
from benchmarks.peer_kai.records import Figures, PodLedger, figures_by_phase
from benchmarks.peer_kai.stages import Hop, PodTrail, stage_figures
from benchmarks.peer_kai.workload import NAMESPACE, QUEUE_LABEL, SCHEDULER_NAME, Job, Workload
from kai_stream.connectors.apiserver import ControlPlane

WARMUP_NAMESPACE = "peer-warmup"
CREATE_CONCURRENCY = 16


class Scheduler(Protocol):
    name: str
    processes: Processes
    scheduler_component: str

    def prepare(self, plane: ControlPlane) -> None: ...

    async def admit(self, plane: ControlPlane) -> None: ...

    async def start(self, plane: ControlPlane) -> None: ...

    def side_tasks(self, api: Api) -> list[Coroutine[Any, Any, None]]: ...

    async def trails(self, names: set[str]) -> dict[str, PodTrail]: ...

    def stop(self) -> None: ...


@dataclass
class RunResult:
    scheduler: str
    scheduler_component: str
    figures: dict[str, Figures]
    usage: dict[str, Usage]
    warmup_s: float
    stages: dict[str, dict[str, Hop]] = field(default_factory=dict)
    """Per phase, the created→bound time hop by hop (``stages.py``); empty for a scheduler without logs to read."""


@dataclass
class Session:
    """A started fixture with a scheduler on it and the harness's API client and background tasks."""

    plane: ControlPlane
    scheduler: Scheduler
    api: Api
    tasks: list[asyncio.Task[None]]
    warmup_s: float = 0.0

    def check(self) -> None:
        self.scheduler.processes.check()
        for task in self.tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise RuntimeError(f"harness task {task.get_name()} failed: {task.exception()!r}")


def warmup_pod(queue: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "warmup", "namespace": WARMUP_NAMESPACE, "labels": {QUEUE_LABEL: queue}},
            "spec": {"schedulerName": SCHEDULER_NAME, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}}


async def _until(check: Any, session: Session, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        session.check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{session.scheduler.name}: {what} not within {timeout_s:.0f} s")
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def started(scheduler: Scheduler, objects: list[dict[str, Any]], workdir: Path,
                  warmup_queue: str | None, ready_timeout_s: float = 180.0) -> AsyncIterator[Session]:
    """``scheduler`` running on a fresh fixture loaded with ``objects``; with ``warmup_queue``, a warm-up pod in
    that queue has been bound before this yields."""
    plane = ControlPlane(workdir=workdir)
    await asyncio.to_thread(plane.start)
    api: Api | None = None
    tasks: list[asyncio.Task[None]] = []
    try:
        await asyncio.to_thread(scheduler.prepare, plane)
        namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                      for name in (NAMESPACE, WARMUP_NAMESPACE)]
        pods = [o for o in objects if o.get("kind") == "Pod"]
        setup = [o for o in objects if o.get("kind") != "Pod"]
        await asyncio.to_thread(plane.load_objects, namespaces + kai.priority_classes() + setup)
        await scheduler.admit(plane)
        await asyncio.to_thread(plane.load_objects, pods)
        await scheduler.start(plane)
        api = Api(plane)
        tasks = [asyncio.create_task(coro) for coro in scheduler.side_tasks(api)]
        session = Session(plane, scheduler, api, tasks)
        if warmup_queue is not None:
            began = time.monotonic()
            await api.create(warmup_pod(warmup_queue))

            async def bound() -> bool:
                code, pod = await session.api.request("GET", f"/api/v1/namespaces/{WARMUP_NAMESPACE}/pods/warmup")
                return code == 200 and bool(pod["spec"].get("nodeName"))

            await _until(bound, session, ready_timeout_s, "the warm-up pod bound")
            session.warmup_s = time.monotonic() - began
        yield session
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if api is not None:
            await api.close()
        scheduler.stop()
        await asyncio.to_thread(plane.stop)


async def dump(session: Session, directory: Path) -> None:
    """The server's pods, PodGroups and events as JSON files in ``directory`` (to explain an outcome)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, path in (("pods", "/api/v1/pods"), ("events", "/api/v1/events"),
                       ("podgroups", "/apis/scheduling.run.ai/v2alpha2/podgroups")):
        code, answer = await session.api.request("GET", path)
        (directory / f"{name}.json").write_bytes(orjson.dumps(answer if code == 200 else {"code": code},
                                                              option=orjson.OPT_INDENT_2))


async def _create_job(api: Api, job: Job, ledger: PodLedger, gate: asyncio.Semaphore) -> None:
    async with gate:
        if job.podgroup is not None:
            await api.create(job.podgroup)
        for pod in job.pods:
            await api.create(pod)
            ledger.created(pod["metadata"]["name"], time.monotonic())


async def create_pods(api: Api, workload: Workload, ledger: PodLedger, rate: float) -> None:
    """The steady jobs, each at its slot of ``rate`` pods/s; then every burst job at once."""
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)
    began = time.monotonic()
    sent = 0
    running: list[asyncio.Task[None]] = []
    for job in (j for j in workload.jobs if j.phase == "steady"):
        delay = began + sent / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        running.append(asyncio.create_task(_create_job(api, job, ledger, gate)))
        sent += len(job.pods)
    await asyncio.gather(*running)
    await asyncio.gather(*(_create_job(api, job, ledger, gate) for job in workload.jobs if job.phase == "burst"))


async def measure(session: Session, workload: Workload, rate: float, settle_s: float,
                  timeout_s: float) -> RunResult:
    ledger = PodLedger()
    wall_offset = time.time() - time.monotonic()
    for job in workload.jobs:
        for pod in job.pods:
            ledger.expect(pod["metadata"]["name"], job.phase)
    watch = asyncio.create_task(session.api.watch(f"/api/v1/namespaces/{NAMESPACE}/pods", ledger.observe))
    session.tasks.append(watch)
    meter = UsageMeter(session.scheduler.processes.pids())
    meter.mark()
    began = time.monotonic()
    creating = asyncio.create_task(create_pods(session.api, workload, ledger, rate))
    session.tasks.append(creating)
    last_progress, last_count = time.monotonic(), -1
    while True:
        await asyncio.sleep(0.25)
        session.check()
        count = ledger.bound_count()
        if count != last_count:
            last_progress, last_count = time.monotonic(), count
        if creating.done() and count == len(ledger.pods):
            break
        now = time.monotonic()
        if (creating.done() and now - last_progress > settle_s) or now - began > timeout_s:
            break
    usage = meter.read()
    listed, _ = await session.api.items(f"/api/v1/namespaces/{NAMESPACE}/pods")
    now = time.monotonic()
    for pod in listed:
        ledger.observe("MODIFIED", pod, now)
    found = await session.scheduler.trails(set(ledger.pods))
    stages = stage_figures(ledger, found, wall_offset) if found else {}
    return RunResult(session.scheduler.name, session.scheduler.scheduler_component, figures_by_phase(ledger),
                     usage, session.warmup_s, stages)
