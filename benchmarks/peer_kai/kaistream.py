"""kai-stream's whole pipeline against the fixture's API server, each part its own process so its CPU and memory
can be read: the embedded broker (Tansu, memory), the connector and the binder (each with its chart
ServiceAccount's token, as in ``tests/apiserver/test_pipeline_e2e.py``) and the faust scheduler processor, all with
their default settings (1 s ticks)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from benchmarks.peer_kai.api import Api
from benchmarks.peer_kai.processes import Processes
from benchmarks.peer_kai.stages import PodTrail, trails
from kai_stream.connectors.apiserver import ControlPlane
from kai_stream.engines import Broker, embedded_broker
from kai_stream.kafka import Record, read_topic
from kai_stream.settings import KafkaSettings
from kai_stream.topics import DEFAULT_TOPICS, create_topics


class KaiStream:
    name = "kai-stream"

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.processes = Processes(logdir)
        self.broker: Broker | None = None
        self.scheduler_component = "processor"

    def prepare(self, plane: ControlPlane) -> None:
        """Nothing beyond the fixture: it installs kai-stream's chart (CRDs, RBAC, ServiceAccounts)."""

    async def admit(self, plane: ControlPlane) -> None:
        """kai-stream has no admission webhook."""

    async def start(self, plane: ControlPlane) -> None:
        self.broker = embedded_broker("tansu", memory=True, data_dir=self.logdir / "broker")
        await asyncio.to_thread(self.broker.start)
        self.processes.adopt("broker", self.broker.pid)
        servers = self.broker.bootstrap_servers
        await create_topics(KafkaSettings(bootstrap_servers=servers))
        env = {
            "KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS": servers,
            "KAI_STREAM_HEALTH_ENABLED": "false",
            "KAI_STREAM_PROCESSOR_DATA_DIR": str(self.logdir / "faust"),
            "KAI_STREAM_PROCESSOR_PARENT_PID": str(os.getpid()),
        }
        cli = [sys.executable, "-m", "kai_stream"]
        self.processes.spawn("connector", [*cli, "connector", "--kubeconfig",
                                           str(plane.service_account_kubeconfig("connector"))], env=env)
        self.processes.spawn("processor", [*cli, "processor"], env=env)
        self.processes.spawn("binder", [*cli, "binder", "--kubeconfig",
                                        str(plane.service_account_kubeconfig("binder"))], env=env)

    def side_tasks(self, api: Api) -> list[Coroutine[Any, Any, None]]:
        return []

    async def trails(self, names: set[str]) -> dict[str, PodTrail]:
        """Each pod's first record on cluster-events, decisions and bind-results (``stages.py``)."""
        if self.broker is None:
            return {}
        settings = KafkaSettings(bootstrap_servers=self.broker.bootstrap_servers)
        records: list[Record] = []
        for topic in (DEFAULT_TOPICS.cluster_events, DEFAULT_TOPICS.decisions, DEFAULT_TOPICS.bind_results):
            records += await read_topic(settings, topic)
        return trails(records, names)

    def stop(self) -> None:
        self.processes.stop()
        if self.broker is not None:
            self.broker.stop()
            self.broker = None
