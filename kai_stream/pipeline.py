"""The whole streaming pipeline on one machine: broker + simulated cluster + connector + processor + binder.

``Pipeline`` starts, in order: the embedded broker (``engine``: Tansu or Apache Kafka, memory or durable; or
an external Kafka given ``bootstrap_servers``), the topics, the simulated Kubernetes API (aiohttp, loaded with a
scenario), the Kubernetes connector (a task on this loop), the scheduler processor (a faust worker in a subprocess:
``python -m kai_stream.streams``) and the binder (a task on this loop). Every joint is real: Kafka over
TCP, the Kubernetes API over HTTP through kubernetes-asyncio.

``LogTail`` follows cluster-events and decisions (no consumer group) so callers can show decisions live,
wait for quiescence, and fold the result the way ``simulate`` reports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config

from kai_stream import prefork
from kai_stream.binder.kube import api_client
from kai_stream.binder.runner import run_binder
from kai_stream.broker import BrokerProcess
from kai_stream.connectors.kubernetes import KubernetesConnector
from kai_stream.connectors.kubernetes.kinds import KINDS
from kai_stream.connectors.simcluster import scenario as sim_scenario
from kai_stream.connectors.simcluster.client import kube_client_config
from kai_stream.connectors.simcluster.server import SimCluster
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindRequested,
    ClusterEvent,
    ConfigRecorded,
    Decision,
    DecisionsRecord,
    EvictionRequested,
    MalformedEvent,
    PodObserved,
    PodRemoved,
    event_key,
    loads_cluster_event,
    loads_decisions_record,
    stable_id,
)
from kai_stream.core.manifests import ManifestError, object_to_events
from kai_stream.core.state import ClusterState, apply
from kai_stream.emulation import recreated_uid, round_barrier
from kai_stream.engines import Broker, Engine, embedded_broker
from kai_stream.kafka import make_consumer, topic_partitions
from kai_stream.settings import KafkaSettings
from kai_stream.simulate import DEFAULT_TERMINATION_GRACE_S, SimulationResult
from kai_stream.streams.engine import is_decision
from kai_stream.subscribe import high_watermarks
from kai_stream.topics import TopicNames, create_topics

log = logging.getLogger(__name__)

EPOCH = "1970-01-01T00:00:00Z"
_GROUP_TIMING: dict[str, Any] = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 300}


@dataclass
class PipelineOptions:
    """What to run. ``scenario``: YAML loaded into the simulated cluster before the connector starts.

    ``scenario_time`` + ``pin_scenario_identity`` + no ticks is how ``simulate --live`` runs a scenario
    "at one instant" as the in-process simulate does: observed events carry the scenario clock
    (``Pipeline.scenario_now``: 0, advanced only by the rounds' grace-period jumps) and the pods the
    uid/creation time ``load_scenario`` gives them; every component still runs for real.
    ``termination_grace``: simulated seconds an evicted pod stays terminating (× ``time_scale`` wall seconds).
    ``kubeconfig``: talk to that Kubernetes API instead of starting the simulated cluster (``scenario`` is then not
    loaded; ``cluster`` stays unstarted), the binder with ``binder_kubeconfig`` when given.
    ``binder_subprocess`` / ``connector_subprocess``: run that component as a ``kai-stream`` process (which a test
    can SIGKILL) instead of a task on this loop.
    ``supervise``: the processor and those component processes run their worker under ``kai_stream/prefork.py``
    (forked again at once when it dies; ``Pipeline.kill_worker`` kills it).
    ``secure``: the embedded broker's client listener is SASL_SSL (``--engine kafka`` only). ``kafka``: the client
    settings of a Kafka of one's own (security included) in place of ``bootstrap_servers`` and the environment;
    every component, subprocesses included, uses them.
    """

    scenario: Path | None = None
    durable: bool = False
    data_dir: Path = Path(".kai-stream")
    bootstrap_servers: str | None = None
    kafka: KafkaSettings | None = None
    engine: Engine = "tansu"
    secure: bool = False
    topic_prefix: str = ""
    config_path: Path | None = None
    tick_interval_s: float | None = 1.0
    scenario_time: bool = False
    scheduler_name: str = "kai-scheduler"
    time_scale: float = 1.0
    termination_grace: float = DEFAULT_TERMINATION_GRACE_S
    pin_scenario_identity: bool = False
    processor_app_id: str | None = None
    binder_group_id: str | None = None
    processor_env: dict[str, str] = field(default_factory=dict)
    binder_subprocess: bool = False
    connector_subprocess: bool = False
    supervise: bool = False
    tail: bool = True
    kubeconfig: Path | None = None
    binder_kubeconfig: Path | None = None
    progress: Callable[[str], None] | None = field(default=None, compare=False)
    """Called with what ``Pipeline.start`` is doing now, before each of its steps (for a progress display)."""


def pin_identity(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give objects without them the uid and creation time ``load_scenario`` assumes (uid from kind,
    namespace and name; creation at time 0), so a live run sees the same pods as an in-process one."""
    pinned = []
    for obj in objs:
        meta = dict(obj.get("metadata") or {})
        kind = str(obj.get("kind", ""))
        namespace = str(meta.get("namespace") or "default")
        meta.setdefault("uid", stable_id(kind, namespace, str(meta.get("name", ""))))
        meta.setdefault("creationTimestamp", EPOCH)
        pinned.append({**obj, "metadata": meta})
    return pinned


async def _load_kubeconfig(path: Path) -> client.Configuration:
    configuration = client.Configuration()
    await kube_config.load_kube_config(config_file=str(path), client_configuration=configuration)
    return configuration


def _without_sigint(start: Callable[[], object]) -> None:
    """Run ``start`` (which spawns processes) with SIGINT blocked in this thread, so the children inherit
    the block: a Ctrl-C in the terminal reaches only us, and we stop them in order."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _wait_or_kill(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """Wait for a stopping process, SIGKILL it after ``grace_s`` (a supervisor whose worker is slow to stop)."""
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class LogTail:
    """Follows cluster-events and decisions from the beginning; keeps every record, decoded."""

    def __init__(self, kafka: KafkaSettings, names: TopicNames) -> None:
        self.kafka = kafka
        self.names = names
        self.events: dict[int, list[tuple[int, ClusterEvent]]] = defaultdict(list)
        self.decisions: dict[int, list[DecisionsRecord]] = defaultdict(list)
        self.last_arrival = time.monotonic()
        self.positions: dict[TopicPartition, int] = {}
        """Per partition: past the last record read (what a consumer group commits after it)."""
        self.read_to: dict[TopicPartition, int] = {}
        """Per partition: the consumer's position, past control records too (Kafka's transaction markers take
        offsets): what compares with the high-watermark."""
        self.listeners: list[Callable[[DecisionsRecord], None]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        consumer = make_consumer(self.kafka, group_id=None)
        await consumer.start()
        tps = [
            TopicPartition(topic, p)
            for topic in (self.names.cluster_events, self.names.decisions)
            for p in await topic_partitions(consumer, topic)
        ]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._follow(consumer), name="log-tail")

    async def _follow(self, consumer: Any) -> None:
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=100, max_records=5000)
                for tp, records in sorted(batches.items()):
                    for record in records:
                        self._take(tp, record)
                    self.positions[tp] = records[-1].offset + 1
                    self.last_arrival = time.monotonic()
                for tp in consumer.assignment():
                    self.read_to[tp] = await consumer.position(tp)
        finally:
            await consumer.stop()

    def _take(self, tp: TopicPartition, record: Any) -> None:
        try:
            if tp.topic == self.names.cluster_events:
                self.events[tp.partition].append((record.offset, loads_cluster_event(record.value or b"")))
            else:
                decoded = loads_decisions_record(record.value or b"")
                self.decisions[tp.partition].append(decoded)
                for listener in self.listeners:
                    listener(decoded)
        except MalformedEvent:
            return

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def all_decisions(self) -> list[Decision]:
        return [d for p in sorted(self.decisions) for d in self.decisions[p] if is_decision(d)]

    def fold(self) -> ClusterState:
        """One state over every partition: events in offset order, each partition's decisions folded right
        after the event at their input offset (as the processor did)."""
        state = ClusterState()
        for partition in sorted(set(self.events) | set(self.decisions)):
            pending = [d for d in self.decisions.get(partition, []) if is_decision(d)]
            index = 0
            for offset, event in self.events.get(partition, []):
                apply(state, event)
                while index < len(pending) and pending[index].input_offset <= offset:
                    apply(state, pending[index])
                    index += 1
            for decision in pending[index:]:
                apply(state, decision)
        return state

    def result(self, config: SchedulerConfig) -> SimulationResult:
        """The live run reported as ``simulate`` reports an in-process one."""
        decisions = self.all_decisions()
        result = SimulationResult(state=self.fold(), config=config, decisions=decisions)
        for decision in decisions:
            if isinstance(decision, EvictionRequested):
                result.evicted[decision.uid] = (f"{decision.namespace}/{decision.name}", decision.queue)
        return result

    def configs(self) -> list[ConfigRecorded]:
        return [d for p in sorted(self.decisions) for d in self.decisions[p] if isinstance(d, ConfigRecorded)]


class Pipeline:
    """Broker, simulated cluster, connector, processor and binder, started and stopped together."""

    def __init__(self, options: PipelineOptions) -> None:
        self.options = options
        self.names = TopicNames.with_prefix(options.topic_prefix)
        prefix = options.topic_prefix
        self.processor_app_id = options.processor_app_id or f"{prefix}kai-stream-scheduler"
        self.binder_group_id = options.binder_group_id or f"{prefix}kai-stream-binder"
        self.broker: Broker | None = None
        self.kafka: KafkaSettings | None = None
        self.cluster = SimCluster(time_scale=options.time_scale, termination_grace=options.termination_grace)
        self.scenario_now = 0.0
        """The scenario clock (event time with ``scenario_time``): moved only by ``run_rounds``."""
        self.connector: KubernetesConnector | None = None
        self.tail: LogTail | None = None
        self._api: client.ApiClient | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._binder_stop: asyncio.Event | None = None
        self._binder_config: client.Configuration | None = None
        self._processor: subprocess.Popen[bytes] | None = None
        self._binder: subprocess.Popen[bytes] | None = None
        self._extra_processes: list[subprocess.Popen[bytes]] = []
        self._connector_process: subprocess.Popen[bytes] | None = None
        self._workdir = tempfile.TemporaryDirectory(prefix="kai-stream-pipeline-")
        self._processor_log: Any = None
        self._terminating: set[str] = set()

    # ------------------------------------------------------------------ lifecycle

    def _step(self, what: str) -> None:
        if self.options.progress is not None:
            self.options.progress(what)

    async def start(self) -> None:
        opts = self.options
        if opts.kafka is not None:
            self.kafka = opts.kafka.model_copy(update=_GROUP_TIMING)
        elif opts.bootstrap_servers is None:
            self._step("starting the embedded broker")
            self.broker = embedded_broker(
                opts.engine, memory=not opts.durable, data_dir=opts.data_dir, secure=opts.secure
            )
            await asyncio.to_thread(_without_sigint, self.broker.start)
            self.kafka = self.broker.client_settings(**_GROUP_TIMING)
        else:
            self.kafka = KafkaSettings.for_servers(opts.bootstrap_servers, **_GROUP_TIMING)
        servers = self.kafka.bootstrap_servers
        self._step(f"creating topics on {servers}")
        await create_topics(self.kafka, names=self.names)
        if opts.tail:
            self.tail = LogTail(self.kafka, self.names)
            await self.tail.start()
        if opts.kubeconfig is not None:
            self._api = api_client(await _load_kubeconfig(opts.kubeconfig))
            self._binder_config = await _load_kubeconfig(opts.binder_kubeconfig or opts.kubeconfig)
        else:
            self._step("starting the simulated cluster")
            url = await self.cluster.start()
            if opts.scenario is not None:
                objs = sim_scenario.read_documents(opts.scenario)
                self.cluster.load_objects(pin_identity(objs) if opts.pin_scenario_identity else objs)
            self._api = api_client(kube_client_config(url))
        self._step("connector: listing the cluster")
        self.start_connector()
        if self.connector is not None:
            await asyncio.wait_for(self.connector.synced.wait(), 60)
            await self.connector.flush()
        self._step("starting the processor and the binder")
        self.start_processor()
        self.start_binder()

    async def stop(self) -> None:
        """Stop everything in order. Every step runs even when an earlier one fails (a failed binder must not
        leave the processor subprocess or the broker running); the first failure is raised at the end."""
        failures: list[BaseException] = []

        async def step(action: Callable[[], Any]) -> None:
            try:
                result = action()
                if asyncio.iscoroutine(result):
                    await result
            except Exception as exc:
                log.warning("pipeline: stopping: %r", exc)
                failures.append(exc)

        def stop_extra_processes() -> None:
            for extra in self._extra_processes:
                if extra.poll() is None:
                    extra.terminate()
                    try:
                        extra.wait(15)
                    except subprocess.TimeoutExpired:
                        extra.kill()

        await step(self.stop_binder)
        await step(self.stop_connector)
        await step(self.stop_processor)
        await step(lambda: asyncio.to_thread(stop_extra_processes))
        if self.tail is not None:
            await step(self.tail.stop)
        if self._api is not None:
            await step(self._api.close)
        await step(self.cluster.stop)
        if self.broker is not None:
            await step(lambda: asyncio.to_thread(self.broker.stop) if self.broker is not None else None)
        if self._processor_log is not None:
            await step(self._processor_log.close)
        await step(self._workdir.cleanup)
        if failures:
            raise failures[0]

    async def __aenter__(self) -> Pipeline:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _cancel(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # it failed earlier; stopping goes on
                log.warning("pipeline: %s had failed: %r", name, exc)

    def failed(self) -> str | None:
        """Why a component died, if one did."""
        for name, task in self._tasks.items():
            if task.done() and not task.cancelled() and task.exception() is not None:
                return f"{name}: {task.exception()!r}"
        if self._processor is not None and self._processor.poll() is not None:
            return f"processor exited with {self._processor.returncode}:\n{self.processor_output()}"
        if self._binder is not None and self._binder.poll() is not None:
            return f"binder exited with {self._binder.returncode}:\n{self.processor_output()}"
        if self._connector_process is not None and self._connector_process.poll() is not None:
            return f"connector exited with {self._connector_process.returncode}:\n{self.processor_output()}"
        return None

    # ------------------------------------------------------------------ components

    def _cli(self, command: str, kubeconfig: Path | None, *args: str) -> subprocess.Popen[bytes]:
        """A ``kai-stream <command>`` process on this pipeline's broker and API, logging to the processor log."""
        assert self.kafka is not None
        api = ["--kubeconfig", str(kubeconfig)] if kubeconfig is not None else ["--api-url", str(self.cluster.url)]
        argv = [sys.executable, "-c", "from kai_stream.cli import main; main()", command,
                "--bootstrap-servers", self.kafka.bootstrap_servers, *api,
                "--topic-prefix", self.options.topic_prefix, *args,
                *(["--supervise"] if self.options.supervise else [])]
        return subprocess.Popen(argv, env=self.processor_env(), stdin=subprocess.DEVNULL,
                                stdout=self._log_file(), stderr=subprocess.STDOUT, start_new_session=True)

    def start_connector(self) -> None:
        assert self.kafka is not None and self._api is not None
        if self.options.connector_subprocess:
            self._connector_process = self._cli(
                "connector", self.options.kubeconfig, "--scheduler-name", self.options.scheduler_name,
                "--tick-interval", str(self.options.tick_interval_s or 0))
            return
        self.connector = KubernetesConnector(
            self._api,
            self.kafka,
            self.names,
            scheduler_name=self.options.scheduler_name,
            tick_interval_s=self.options.tick_interval_s,
            clock=(lambda: self.scenario_now) if self.options.scenario_time else time.time,
        )
        self._tasks["connector"] = asyncio.create_task(self.connector.run(), name="connector")

    async def stop_connector(self, *, kill: bool = False) -> None:
        """Stop the connector: SIGTERM, or SIGKILL with ``kill``, for a process; cancel the task otherwise."""
        proc, self._connector_process = self._connector_process, None
        if proc is not None and proc.poll() is None:
            proc.kill() if kill else proc.terminate()
            await asyncio.to_thread(_wait_or_kill, proc)
        await self._cancel("connector")

    def processor_env(self) -> dict[str, str]:
        assert self.kafka is not None
        env = {
            **os.environ,
            **self.kafka.client_env(),
            "KAI_STREAM_KAFKA_SESSION_TIMEOUT_MS": str(self.kafka.session_timeout_ms),
            "KAI_STREAM_KAFKA_HEARTBEAT_INTERVAL_MS": str(self.kafka.heartbeat_interval_ms),
            "KAI_STREAM_PROCESSOR_APP_ID": self.processor_app_id,
            "KAI_STREAM_PROCESSOR_TOPIC_PREFIX": self.options.topic_prefix,
            "KAI_STREAM_PROCESSOR_DATA_DIR": str(Path(self._workdir.name) / "faust"),
            "KAI_STREAM_HEALTH_ENABLED": "false",
            "KAI_STREAM_PROCESSOR_PARENT_PID": str(os.getpid()),
            "KAI_STREAM_PROCESSOR_INSTANCE_ID": f"{self.processor_app_id}-0",
            "KAI_STREAM_PROCESSOR_SUPERVISE": str(self.options.supervise).lower(),
            **self.options.processor_env,
        }
        if self.options.config_path is not None:
            env["KAI_STREAM_PROCESSOR_CONFIG_PATH"] = str(self.options.config_path)
        return env

    def _log_file(self) -> Any:
        if self._processor_log is None:
            self._processor_log = open(Path(self._workdir.name) / "processor.log", "ab")  # noqa: SIM115
        return self._processor_log

    def start_processor(self) -> None:
        self._log_file()
        self._processor = subprocess.Popen(
            [sys.executable, "-m", "kai_stream.streams"],
            env=self.processor_env(),
            stdin=subprocess.DEVNULL,
            stdout=self._processor_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def add_processor(self) -> subprocess.Popen[bytes]:
        """Another processor in the same consumer group (the group spreads the partitions over them)."""
        env = self.processor_env()
        env.pop("KAI_STREAM_PROCESSOR_INSTANCE_ID")  # a dynamic member: the static id is the first processor's
        proc = subprocess.Popen(
            [sys.executable, "-m", "kai_stream.streams"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file(),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._extra_processes.append(proc)
        return proc

    def stop_processor(self, *, kill: bool = False) -> None:
        """Stop the processor (SIGTERM, or SIGKILL with ``kill``: a crash, nothing flushed or committed)."""
        proc, self._processor = self._processor, None
        if proc is None or proc.poll() is not None:
            return
        if kill:
            proc.kill()
        else:
            proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @property
    def processor_pid(self) -> int | None:
        return self._processor.pid if self._processor is not None else None

    @property
    def binder_pid(self) -> int | None:
        """The binder's process id (``binder_subprocess``); None when it runs on this loop."""
        return self._binder.pid if self._binder is not None else None

    def processor_output(self, chars: int | None = 4000) -> str:
        """The end of what the processors printed (``chars=None``: all of it)."""
        path = Path(self._workdir.name) / "processor.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return text[-chars:] if chars is not None else text

    def start_binder(self) -> None:
        """The binder: a task on this loop, or (``binder_subprocess``) a ``kai-stream binder`` process."""
        assert self.kafka is not None
        if self.options.binder_subprocess:
            self._binder = self._spawn_binder()
            return
        self._binder_stop = asyncio.Event()
        self._tasks["binder"] = asyncio.create_task(
            run_binder(
                self.kafka,
                self._binder_config or kube_client_config(str(self.cluster.url)),
                stop_event=self._binder_stop,
                topics=self.names,
                group_id=self.binder_group_id,
            ),
            name="binder",
        )

    def _spawn_binder(self) -> subprocess.Popen[bytes]:
        return self._cli("binder", self.options.binder_kubeconfig or self.options.kubeconfig,
                         "--group-id", self.binder_group_id, "--health-port", "0")

    def add_binder(self) -> subprocess.Popen[bytes]:
        """Another binder process in the same consumer group (the group spreads the decisions' partitions over
        them; when one dies, the others take its partitions over once its session times out)."""
        proc = self._spawn_binder()
        self._extra_processes.append(proc)
        return proc

    async def stop_binder(self, *, kill: bool = False) -> None:
        """Stop the binder: gracefully (finish, commit) or, with ``kill``, at once (SIGKILL / cancel)."""
        proc, self._binder = self._binder, None
        if proc is not None and proc.poll() is None:
            proc.kill() if kill else proc.terminate()
            await asyncio.to_thread(_wait_or_kill, proc)
        if kill:
            await self._cancel("binder")
            return
        if self._binder_stop is not None:
            self._binder_stop.set()
        task = self._tasks.pop("binder", None)
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def restart_broker(self, *, kill: bool = True) -> None:
        """Stop the embedded broker (SIGKILL with ``kill``: a crash, nothing flushed) and start it again on its
        port and data directory, as a supervisor would; the components reconnect to it by themselves."""
        broker = self.broker
        if broker is None or self.kafka is None:
            raise RuntimeError("no embedded broker to restart (an external one was given)")
        if kill and broker.pid is not None:
            os.kill(broker.pid, signal.SIGKILL)
        await asyncio.to_thread(broker.stop)
        port = int(self.kafka.bootstrap_servers.rsplit(":", 1)[1])
        self.broker = embedded_broker(
            self.options.engine, memory=not self.options.durable, port=port, data_dir=self.options.data_dir,
            secure=self.options.secure,
        )
        if isinstance(self.broker, BrokerProcess):
            self.broker.startup_timeout_s = max(self.broker.startup_timeout_s, 300.0)  # a JVM on a loaded host
        await asyncio.to_thread(_without_sigint, self.broker.start)

    def component_pids(self) -> dict[str, int]:
        """The process ids of the components that run as processes now (broker, processor, binder, connector)."""
        procs = {"processor": self._processor, "binder": self._binder, "connector": self._connector_process}
        pids = {name: proc.pid for name, proc in procs.items() if proc is not None and proc.poll() is None}
        if self.broker is not None and self.broker.pid is not None:
            pids["broker"] = self.broker.pid
        return pids

    async def kill_worker(self, component: str, *, timeout_s: float = 60.0) -> int:
        """SIGKILL the worker of a supervised component (``processor``, ``binder``, ``connector``) once it runs (a
        supervisor forks it after its imports); the supervisor forks another at once. The killed worker's pid."""
        deadline = time.monotonic() + timeout_s
        while True:
            supervisor = self.component_pids().get(component)
            worker = prefork.worker_pid(supervisor) if supervisor is not None else None
            if worker is not None:
                os.kill(worker, signal.SIGKILL)
                return worker
            if time.monotonic() > deadline:
                raise RuntimeError(f"{component} has no supervised worker running after {timeout_s} s")
            await asyncio.sleep(0.05)

    def restart_exited(self) -> list[str]:
        """Start again every component process (processor, binder, connector) that exited on its own, as a
        supervisor would; the names of those restarted."""
        restarted = []
        if self._processor is not None and self._processor.poll() is not None:
            self.start_processor()
            restarted.append("processor")
        if self._binder is not None and self._binder.poll() is not None:
            self._binder = self._spawn_binder()
            restarted.append("binder")
        if self._connector_process is not None and self._connector_process.poll() is not None:
            self.start_connector()
            restarted.append("connector")
        return restarted

    # ------------------------------------------------------------------ waiting

    async def committed(self, group: str, topic: str) -> int:
        """Sum of a consumer group's committed offsets on ``topic`` (read without joining the group)."""
        return sum((await self.committed_by_partition(group, topic)).values())

    async def committed_by_partition(self, group: str, topic: str) -> dict[int, int]:
        """A consumer group's committed offset per partition of ``topic`` (0 where none)."""
        assert self.kafka is not None
        consumer = make_consumer(self.kafka, group_id=group)
        await consumer.start()
        try:
            partitions = await topic_partitions(consumer, topic)
            return {p: (await consumer.committed(TopicPartition(topic, p))) or 0 for p in partitions}
        finally:
            await consumer.stop()

    def tail_ends(self, topic: str) -> dict[TopicPartition, int]:
        assert self.tail is not None
        return {tp: off for tp, off in sorted(self.tail.positions.items()) if tp.topic == topic}

    def tail_position(self, topic: str) -> int:
        assert self.tail is not None
        return sum(off for tp, off in self.tail.positions.items() if tp.topic == topic)

    async def wait_caught_up(self, *, timeout_s: float = 60.0) -> None:
        """Until processor and binder have committed at least what the log holds now (ticks may go on)."""
        deadline = time.monotonic() + timeout_s
        await asyncio.sleep(0.5)
        events_end = self.tail_position(self.names.cluster_events)
        while await self.committed(self.processor_app_id, self.names.cluster_events) < events_end:
            if time.monotonic() > deadline:
                committed = await self.committed_by_partition(self.processor_app_id, self.names.cluster_events)
                ends = {tp.partition: o for tp, o in self.tail_ends(self.names.cluster_events).items()}
                raise TimeoutError(
                    f"processor did not catch up within {timeout_s}s: committed {committed}, log ends {ends}\n"
                    + self.processor_output()
                )
            await asyncio.sleep(0.25)
        await asyncio.sleep(0.5)
        decisions_end = self.tail_position(self.names.decisions)
        while await self.committed(self.binder_group_id, self.names.decisions) < decisions_end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"binder did not catch up within {timeout_s}s:\n{self.processor_output()}")
            await asyncio.sleep(0.25)

    async def wait_quiescent(self, *, quiet_s: float = 1.5, timeout_s: float = 120.0) -> None:
        """Until nothing new arrived for ``quiet_s`` and processor and binder committed everything there is."""
        assert self.tail is not None and self.connector is not None
        deadline = time.monotonic() + timeout_s
        await asyncio.wait_for(self.connector.synced.wait(), timeout_s)
        while True:
            reason = self.failed()
            if reason is not None:
                raise RuntimeError(f"pipeline component failed: {reason}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"pipeline not quiescent within {timeout_s}s")
            await asyncio.sleep(0.25)
            if time.monotonic() - self.tail.last_arrival < quiet_s:
                continue
            events_end = self.tail_position(self.names.cluster_events)
            decisions_end = self.tail_position(self.names.decisions)
            if events_end == 0:
                continue
            if await self.committed(self.processor_app_id, self.names.cluster_events) < events_end:
                continue
            if await self.committed(self.binder_group_id, self.names.decisions) < decisions_end:
                continue
            if time.monotonic() - self.tail.last_arrival >= quiet_s:
                return


    async def wait_processor_caught_up(self, *, timeout_s: float = 60.0) -> None:
        """Until the processor has committed every cluster-events record there is now (works without the tail)."""
        assert self.kafka is not None
        deadline = time.monotonic() + timeout_s
        ends = await high_watermarks(self.kafka, self.names.cluster_events)
        while True:
            reason = self.failed()
            if reason is not None:
                raise RuntimeError(f"pipeline component failed: {reason}")
            committed = await self.committed_by_partition(self.processor_app_id, self.names.cluster_events)
            if all(committed.get(p, 0) >= end for p, end in ends.items()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"processor did not catch up within {timeout_s}s: {committed} < {ends}")
            await asyncio.sleep(0.25)

    # ------------------------------------------------------------------ rounds (simulate --live)

    def signal_processor(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the processor subprocess (SIGSTOP / SIGCONT pause and resume it)."""
        if self._processor is not None and self._processor.poll() is None:
            self._processor.send_signal(sig)

    async def _until_quiet(
        self, group: str, topic: str, deadline: float, quiet_s: float, *, at_least: int = 0
    ) -> None:
        """Until ``group`` committed all of ``topic`` the tail has seen (at least ``at_least``) and nothing new
        arrived for ``quiet_s``."""
        assert self.tail is not None
        while True:
            reason = self.failed()
            if reason is not None:
                raise RuntimeError(f"pipeline component failed: {reason}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{group} did not settle on {topic}:\n{self.processor_output()}")
            await asyncio.sleep(0.05)
            end = self.tail_position(topic)
            if end < at_least or time.monotonic() - self.tail.last_arrival < quiet_s:
                continue
            if await self.committed(group, topic) < end:
                continue
            if time.monotonic() - self.tail.last_arrival >= quiet_s and self.tail_position(topic) == end:
                return

    def _missing_reaction(self, decisions: list[Decision]) -> list[str]:
        """What the connector has not yet published of the cluster's reaction to ``decisions``: a bound pod seen
        Running on its node, an evicted pod removed, and its replacement (if its controller made one) seen."""
        assert self.tail is not None
        running: set[str] = set()
        removed: set[str] = set()
        observed: set[str] = set()
        terminating: set[str] = set()
        for events in self.tail.events.values():
            for _, event in events:
                if isinstance(event, PodObserved):
                    observed.add(event.pod.uid)
                    if event.pod.node_name is not None and event.pod.phase == "Running":
                        running.add(event.pod.uid)
                    if event.pod.terminating:
                        terminating.add(event.pod.uid)
                elif isinstance(event, PodRemoved):
                    removed.add(event.uid)
        live_uids = {str(p["metadata"].get("uid", "")) for p in self.cluster.objects("pods")}
        missing: list[str] = []
        for decision in decisions:
            if isinstance(decision, BindRequested) and decision.uid not in running:
                missing.append(f"{decision.namespace}/{decision.name} running")
            elif isinstance(decision, EvictionRequested):
                if decision.uid in self._terminating:
                    if decision.uid not in terminating and decision.uid not in removed:
                        missing.append(f"{decision.namespace}/{decision.name} terminating")
                elif decision.uid not in removed:
                    missing.append(f"{decision.namespace}/{decision.name} removed")
                replacement = recreated_uid(decision.uid)
                if replacement in live_uids and replacement not in observed:
                    missing.append(f"{decision.namespace}/{decision.name} re-created")
        return missing

    def _connector_behind(self) -> list[str]:
        """What of the simulated cluster's current objects the connector has not published yet (an object at a
        version it has not observed, or one gone without its removal): empty once cluster-events holds the
        API's whole state, the binder's status marks included."""
        assert self.connector is not None
        catalog = self.connector.catalog
        behind: list[str] = []
        present: set[tuple[str, str, str]] = set()
        for kind in KINDS:
            for obj in self.cluster.objects(kind.plural):
                try:
                    events = object_to_events(
                        {**obj, "kind": kind.kind, "apiVersion": kind.api_version},
                        ts=0.0,
                        scheduler_name=self.options.scheduler_name,
                        dra=self.connector.dra,
                    )
                except (ManifestError, KeyError):
                    continue
                for event in events:
                    key = event_key(event)
                    if key is not None:
                        present.add(key)
                        if catalog.is_new(key, event):
                            behind.append(f"{'/'.join(filter(None, key))} observed")
        behind.extend(f"{'/'.join(filter(None, key))} removed" for key in catalog.objects if key not in present)
        return behind

    async def _until_reaction_observed(self, decisions: list[Decision], deadline: float, quiet_s: float) -> None:
        """Until the connector published the whole reaction to a round's decisions and everything else the API
        now holds, then quiet on cluster-events: a quiet period alone is not proof under load (a watch event can
        lag the binder's commit)."""
        while missing := self._missing_reaction(decisions) or self._connector_behind():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster's reaction was not observed: {', '.join(missing[:5])}")
            await asyncio.sleep(0.05)
        await self._until_quiet(self.binder_group_id, self.names.decisions, deadline, quiet_s)

    async def _until_decisions_seen(self, deadline: float) -> None:
        """Until the tail has read every decision on the broker now (fetch high-watermarks)."""
        assert self.kafka is not None
        ends = await high_watermarks(self.kafka, self.names.decisions)
        assert self.tail is not None
        while any(self.tail.read_to.get(TopicPartition(self.names.decisions, p), 0) < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError("the tail did not read the round's decisions")
            await asyncio.sleep(0.02)

    async def run_rounds(self, *, quiet_s: float = 0.3, timeout_s: float = 120.0) -> int:
        """Drive the pipeline in rounds, the way the in-process simulate runs (``kai_stream/simulate.py``), and
        return the number of rounds. The processor runs cycles only on a Tick (``cycle_on=tick``) and the
        simulated API holds every write (``hold_writes``) before the binder starts. Per round: (1) once the log
        holds everything of the previous round, the round's barrier Tick (``round_barrier``) is published and
        the processor decides on exactly the log up to it; (2) once it has committed the barrier and the tail
        has read its decisions, the API lets writes through, and the binder's outcomes plus the connector's
        observations of what it did land in cluster-events until the whole reaction is observed and
        everything is committed and quiet; the pods a consolidation moved are re-created (standing in for their
        workload controllers, as the in-process simulate does); (3) writes are held again. A round that decides
        nothing ends the run, unless evicted pods are still terminating: then the scenario clock jumps by the
        termination grace, they are removed (``_end_grace``) and rounds go on, as in the in-process simulate.
        Where a cycle lands depends only on the barriers, never on timing.
        """
        assert self.tail is not None and self.connector is not None
        deadline = time.monotonic() + timeout_s
        await asyncio.wait_for(self.connector.synced.wait(), timeout_s)
        seen = 0
        rounds = 0
        while True:
            rounds += 1
            now = self.scenario_now if self.options.scenario_time else time.time()
            await self.connector.publish(round_barrier(rounds, now))
            assert self.kafka is not None
            barrier_end = sum((await high_watermarks(self.kafka, self.names.cluster_events)).values())
            await self._until_quiet(
                self.processor_app_id, self.names.cluster_events, deadline, quiet_s, at_least=barrier_end
            )
            await self._until_decisions_seen(deadline)
            made = self.tail.all_decisions()
            round_decisions = made[seen:]
            if not round_decisions:
                if not self._terminating:
                    return rounds
                await self._end_grace(deadline, quiet_s)
                continue
            seen = len(made)
            self.cluster.release_writes()
            try:
                await self._until_quiet(
                    self.binder_group_id, self.names.decisions, deadline, quiet_s,
                    at_least=self.tail_position(self.names.decisions),
                )
                self._terminating.update(self._still_terminating(round_decisions))
                moved = [
                    d.uid for d in round_decisions if isinstance(d, EvictionRequested) and d.details.get("move_to")
                ]
                if any([self.cluster.controller.recreate(uid) is not None for uid in moved]):
                    await self._until_quiet(
                        self.binder_group_id, self.names.decisions, deadline, quiet_s,
                        at_least=self.tail_position(self.names.decisions),
                    )
                await self._until_reaction_observed(round_decisions, deadline, quiet_s)
            finally:
                self.cluster.hold_writes()

    def _still_terminating(self, decisions: list[Decision]) -> set[str]:
        """Uids of the pods these decisions evicted that the cluster keeps terminating (grace period running)."""
        evicted = {d.uid for d in decisions if isinstance(d, EvictionRequested)}
        return {
            str(p["metadata"].get("uid"))
            for p in self.cluster.objects("pods")
            if p["metadata"].get("uid") in evicted and p["metadata"].get("deletionTimestamp")
        }

    async def _end_grace(self, deadline: float, quiet_s: float) -> None:
        """The clock jump of ``simulate``'s rounds: the scenario clock advances by the termination grace and every
        terminating evicted pod is removed now (its replacement, if any, created); returns once the connector
        published all of it."""
        assert self.tail is not None
        self.scenario_now += self.options.termination_grace
        uids, self._terminating = self._terminating, set()
        evictions: list[Decision] = [
            d for d in self.tail.all_decisions() if isinstance(d, EvictionRequested) and d.uid in uids
        ]
        self.cluster.kubelets.finish_deletions(uids)
        await self._until_reaction_observed(evictions, deadline, quiet_s)


async def simulate_live(
    scenario: Path,
    config: SchedulerConfig,
    *,
    config_path: Path | None = None,
    timeout_s: float = 120.0,
    termination_grace: float = DEFAULT_TERMINATION_GRACE_S,
    engine: Engine = "tansu",
    bootstrap_servers: str | None = None,
) -> SimulationResult:
    """Run ``scenario`` through the real pipeline in rounds (``Pipeline.run_rounds``); report it as
    ``simulate`` does.

    The scenario is played at one instant, like the in-process simulate: scenario time (event time 0),
    pinned identities, no ticks, durations not played out (the simulated kubelets' clock is stretched);
    the processor starts once the connector has published the initial list. Its consumer-group session is
    long enough (6 s) to outlast the pauses of the rounds.
    """
    options = PipelineOptions(
        scenario=scenario,
        engine=engine,
        bootstrap_servers=bootstrap_servers,
        config_path=config_path,
        scheduler_name=config.scheduler_name,
        tick_interval_s=None,
        time_scale=1e9,
        termination_grace=termination_grace,
        scenario_time=True,
        pin_scenario_identity=True,
        topic_prefix=f"live-{os.getpid()}-{int(time.time() * 1000)}-",
        processor_env={
            "KAI_STREAM_KAFKA_SESSION_TIMEOUT_MS": "6000",
            "KAI_STREAM_KAFKA_HEARTBEAT_INTERVAL_MS": "500",
            "KAI_STREAM_PROCESSOR_CYCLE_ON": "tick",
        },
    )
    pipeline = Pipeline(options)
    pipeline.cluster.hold_writes()
    async with pipeline:
        try:
            await pipeline.run_rounds(timeout_s=timeout_s)
        finally:
            pipeline.cluster.release_writes()  # nothing may wait on the API while the pipeline stops
        assert pipeline.tail is not None
        return pipeline.tail.result(config)
