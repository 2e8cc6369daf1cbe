"""A running processor (``python -m kai_stream.streams``, its own process) serves per-queue metrics: the reclaim
example through broker, simulated cluster, connector, processor and binder; ``/metrics`` read over HTTP."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kai_stream.broker import free_port
from kai_stream.pipeline import Pipeline, PipelineOptions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _queue_samples(text: str) -> dict[tuple[str, str, str], float]:
    return {
        (s.name, s.labels.get("queue", ""), s.labels.get("action", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("kai_stream_queue_")
    }


async def test_running_processor_serves_queue_gauges_and_eviction_counters(broker: str, topic_prefix: str) -> None:
    port = free_port()
    options = PipelineOptions(
        scenario=EXAMPLES / "reclaim.yaml",
        bootstrap_servers=broker,
        topic_prefix=topic_prefix,
        tick_interval_s=0.5,
        processor_env={
            "KAI_STREAM_HEALTH_ENABLED": "true",
            "KAI_STREAM_HEALTH_HOST": "127.0.0.1",
            "KAI_STREAM_HEALTH_PORT": str(port),
        },
    )
    wanted = {
        ("kai_stream_queue_fair_share_gpu", "qa", ""): 2.0,
        ("kai_stream_queue_fair_share_gpu", "qb", ""): 2.0,
        ("kai_stream_queue_allocated_gpu", "qa", ""): 2.0,
        ("kai_stream_queue_allocated_gpu", "qb", ""): 2.0,
        ("kai_stream_queue_evictions_caused_total", "qa", "reclaim"): 2.0,
        ("kai_stream_queue_evictions_suffered_total", "qb", "reclaim"): 2.0,
    }
    samples: dict[tuple[str, str, str], float] = {}
    async with Pipeline(options) as pipeline, aiohttp.ClientSession() as http:
        deadline = time.monotonic() + 90
        while {k: samples.get(k) for k in wanted} != wanted:
            assert pipeline.failed() is None, pipeline.failed()
            assert time.monotonic() < deadline, f"metrics not as wanted: {samples}\n{pipeline.processor_output()}"
            await asyncio.sleep(0.5)
            try:
                async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                    samples = _queue_samples(await resp.text())
            except aiohttp.ClientConnectionError:
                continue
    assert ("kai_stream_queue_evictions_caused_total", "qb", "reclaim") not in samples
    assert samples[("kai_stream_queue_allocated_cpu_cores", "qa", "")] == 0.0
    assert not any(name in ("kai_stream_queue_fair_share", "kai_stream_queue_allocated") for name, _, _ in samples)
