"""`kai-stream binder`: apply scheduler decisions to a Kubernetes API (real or simulated) until Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import warnings
from pathlib import Path
from typing import Annotated

import typer
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config_loader
from rich.console import Console

from kai_stream import prefork
from kai_stream.binder import DEFAULT_GROUP_ID, run_binder
from kai_stream.cli import app
from kai_stream.observability import Health, HealthSettings, serve_health
from kai_stream.reconnect import keep_running
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames


async def load_kube_config(api_url: str | None, kubeconfig: Path | None) -> client.Configuration:
    """``--api-url`` (plain HTTP, e.g. the simulated cluster), else a kubeconfig file, else in-cluster."""
    configuration = client.Configuration()
    if api_url is not None:
        configuration.host = api_url.rstrip("/")
        configuration.verify_ssl = False
    elif kubeconfig is not None:
        await kube_config_loader.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    else:
        with warnings.catch_warnings():  # its "Using inCluster Config" warning precedes the error that says so
            warnings.simplefilter("ignore", UserWarning)
            try:
                await kube_config_loader.load_config(client_configuration=configuration)
            except kube_config_loader.ConfigException as exc:
                raise kube_config_loader.ConfigException(
                    f"no kubeconfig (~/.kube/config, $KUBECONFIG) and not inside a cluster ({exc})"
                ) from None
    return configuration


async def _serve(
    settings: KafkaSettings,
    api_url: str | None,
    kubeconfig: Path | None,
    pools: list[str] | None,
    group_id: str,
    topic_prefix: str,
    health_settings: HealthSettings,
) -> None:
    configuration = await load_kube_config(api_url, kubeconfig)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    health = Health("binder", stale_after_s=60)
    runner = await serve_health(health, health_settings) if health_settings.enabled else None
    try:
        await keep_running(
            "binder",
            lambda: run_binder(
                settings,
                configuration,
                pool_filter=pools or None,
                stop_event=stop,
                topics=TopicNames.with_prefix(topic_prefix),
                group_id=group_id,
                health=health,
            ),
            health,
        )
    finally:
        if runner is not None:
            await runner.cleanup()


@app.command()
def binder(
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka bootstrap servers (default: KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS)")
    ] = None,
    api_url: Annotated[str | None, typer.Option(help="Kubernetes API URL over plain HTTP (simulated cluster)")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig (default ~/.kube/config/in-cluster)")] = None,
    pool: Annotated[list[str] | None, typer.Option(help="only apply decisions of this node pool (repeatable)")] = None,
    group_id: Annotated[str, typer.Option(help="Kafka consumer group")] = DEFAULT_GROUP_ID,
    topic_prefix: Annotated[str, typer.Option(help="prefix of the topic names")] = "",
    health_port: Annotated[int | None, typer.Option(help="port of /healthz /readyz /metrics (0: off)")] = None,
    supervise: Annotated[
        bool, typer.Option(help="fork the binder again at once when it dies (kai_stream/prefork.py)")
    ] = False,
) -> None:
    """Consume decisions, bind/evict pods, mark pending pods for autoscalers, publish outcomes."""
    settings = KafkaSettings.for_servers(bootstrap_servers)
    health_settings = HealthSettings()
    if health_port is not None:
        health_settings = HealthSettings(port=health_port, enabled=health_port != 0)
    Console(stderr=True).print(f"binder: kafka={settings.bootstrap_servers} group={group_id} pools={pool or 'all'}")

    def serve() -> None:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(settings, api_url, kubeconfig, pool, group_id, topic_prefix, health_settings))

    if supervise:
        raise typer.Exit(prefork.supervise("binder", serve))
    serve()
