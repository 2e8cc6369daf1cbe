"""`kai-stream gpu-agent`: run the NVML GPU agent for one node (publishes to cluster-events, or prints JSON)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Annotated

import typer

from kai_stream.cli import app
from kai_stream.connectors.nvml import AgentConfig, GpuAgent, GpuReader, NvmlUnavailable, PynvmlApi, kafka_sink
from kai_stream.connectors.nvml.agent import Sink
from kai_stream.core.events import GpuHealthObserved, dumps
from kai_stream.kafka import make_producer
from kai_stream.observability import Health, HealthSettings, serve_health
from kai_stream.settings import KafkaSettings

EXIT_NO_NVML = 2


async def _print_sink(event: GpuHealthObserved) -> None:
    sys.stdout.write(dumps(event).decode() + "\n")
    sys.stdout.flush()


async def _run(reader: GpuReader, config: AgentConfig, *, once: bool, print_only: bool, kafka: KafkaSettings) -> None:
    health = Health("gpu-agent", stale_after_s=max(60.0, 6 * config.interval_s))
    health.set_condition("nvml", True)
    runner = None
    if not once:
        runner = await serve_health(health, HealthSettings())
    producer = None
    sink: Sink = _print_sink
    try:
        if not print_only:
            health.set_condition("kafka", False, "connecting")
            producer = make_producer(kafka)
            await producer.start()
            health.set_condition("kafka", True)
            sink = kafka_sink(producer, config.topic)
        agent = GpuAgent(reader, config, sink, health=health)
        if once:
            await agent.poll_once()
            return
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await agent.run(stop)
    finally:
        if producer is not None:
            await producer.stop()
        if runner is not None:
            await runner.cleanup()


@app.command("gpu-agent")
def gpu_agent(
    node: Annotated[str, typer.Option(envvar="NODE_NAME", help="this node's name (the DaemonSet passes NODE_NAME)")],
    pool: Annotated[
        str, typer.Option(envvar="KAI_STREAM_NODE_POOL", help="the node's pool (kai.scheduler/node-pool)")
    ] = "default",
    interval: Annotated[float, typer.Option(min=0.1, help="seconds between NVML polls")] = 10.0,
    resync: Annotated[float, typer.Option(min=1.0, help="republish unchanged health after S seconds")] = 300.0,
    once: Annotated[bool, typer.Option("--once", help="read and publish once, then exit")] = False,
    print_only: Annotated[bool, typer.Option("--print", help="print readings as JSON lines instead of Kafka")] = False,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka bootstrap servers (default: KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS)")
    ] = None,
    topic: Annotated[str, typer.Option(help="topic for GpuHealthObserved events")] = "cluster-events",
) -> None:
    """Poll this node's GPUs through NVML and publish their health (fatal XID / uncorrectable ECC = unhealthy)."""
    kafka = KafkaSettings.for_servers(bootstrap_servers)
    config = AgentConfig(node=node, pool=pool, interval_s=interval, resync_s=resync, topic=topic)
    reader = GpuReader(PynvmlApi())
    try:
        reader.open()
    except NvmlUnavailable as exc:
        typer.echo(f"kai-stream gpu-agent: node {node}: {exc}", err=True)
        raise typer.Exit(EXIT_NO_NVML) from exc
    typer.echo(
        f"kai-stream gpu-agent: node {node} pool {pool}: {reader.device_count} GPU(s), driver "
        f"{reader.driver_version or 'unknown'}, XID events {'on' if reader.xid_supported else 'not supported'}",
        err=True,
    )
    try:
        asyncio.run(_run(reader, config, once=once, print_only=print_only, kafka=kafka))
    finally:
        reader.close()
