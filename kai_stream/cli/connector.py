"""`kai-stream connector`: watch a Kubernetes API (real or simulated) and publish cluster-events."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Annotated

import typer
from kubernetes_asyncio import client

from kai_stream import prefork
from kai_stream.cli import app
from kai_stream.cli.binder import load_kube_config
from kai_stream.connectors.kubernetes import KubernetesConnector
from kai_stream.observability import Health, HealthSettings, serve_health
from kai_stream.reconnect import keep_running
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames


async def _serve(
    settings: KafkaSettings,
    api_url: str | None,
    kubeconfig: Path | None,
    topic_prefix: str,
    scheduler_name: str,
    tick_interval: float,
) -> None:
    configuration = await load_kube_config(api_url, kubeconfig)
    health = Health("connector")
    health_settings = HealthSettings()
    serving = health_settings.enabled and health_settings.port != 0
    runner = await serve_health(health, health_settings) if serving else None
    async with client.ApiClient(configuration=configuration) as api:

        async def run_once() -> None:
            connector = KubernetesConnector(
                api,
                settings,
                TopicNames.with_prefix(topic_prefix),
                scheduler_name=scheduler_name,
                tick_interval_s=tick_interval or None,
            )
            health.set_condition("synced", False, "listing")
            synced = asyncio.create_task(connector.synced.wait())

            def mark_synced(done: asyncio.Task[bool]) -> None:
                if not done.cancelled():
                    health.set_condition("synced", True)

            synced.add_done_callback(mark_synced)
            try:
                await connector.run()
            finally:
                synced.cancel()

        task = asyncio.create_task(keep_running("connector", run_once, health))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            if runner is not None:
                await runner.cleanup()


@app.command()
def connector(
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka bootstrap servers (default: KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS)")
    ] = None,
    api_url: Annotated[str | None, typer.Option(help="Kubernetes API URL over plain HTTP (simulated cluster)")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig (default ~/.kube/config/in-cluster)")] = None,
    topic_prefix: Annotated[str, typer.Option(help="prefix of the topic names")] = "",
    scheduler_name: Annotated[str, typer.Option(help="spec.schedulerName of the pods we schedule")] = "kai-scheduler",
    tick_interval: Annotated[float, typer.Option(help="seconds between Tick events (0: none)")] = 1.0,
    supervise: Annotated[
        bool, typer.Option(help="fork the connector again at once when it dies (kai_stream/prefork.py)")
    ] = False,
) -> None:
    """List + watch nodes, pods, Queues, PodGroups, PriorityClasses, Topologies; publish them by pool."""
    settings = KafkaSettings.for_servers(bootstrap_servers)

    def serve() -> None:
        asyncio.run(_serve(settings, api_url, kubeconfig, topic_prefix, scheduler_name, tick_interval))

    if supervise:
        raise typer.Exit(prefork.supervise("connector", serve))
    serve()
