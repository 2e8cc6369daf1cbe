"""The processor's queue metrics over HTTP: fair share and allocation per queue in one unit per metric name, and
evictions caused and suffered per queue, set by ``SchedulerRuntime`` cycles on the embedded broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import EvictionRequested, Model, dumps
from kai_stream.core.manifests import load_scenario
from kai_stream.kafka import make_producer, partition_for, read_topic
from kai_stream.observability import REGISTRY, Health, HealthSettings, bound_port, serve_health
from kai_stream.settings import KafkaSettings
from kai_stream.streams.runtime import InRecord, SchedulerRuntime
from kai_stream.topics import TopicNames

ROOT = Path(__file__).resolve().parents[2]
POOL = "default"


def _evictions(kind: str, queue: str) -> float:
    value = REGISTRY.get_sample_value(
        f"kai_stream_queue_evictions_{kind}_total", {"pool": POOL, "queue": queue, "action": "reclaim"}
    )
    return value or 0.0


async def _scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    runner = await serve_health(Health("processor"), HealthSettings(host="127.0.0.1", port=0))
    try:
        url = f"http://127.0.0.1:{bound_port(runner)}/metrics"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            assert resp.status == 200
            text = await resp.text()
    finally:
        await runner.cleanup()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_processor_sets_queue_gauges_and_eviction_counters(
    kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    # examples/reclaim.yaml: 4 GPUs, qa and qb deserve 2 each; qb runs 4 one-GPU pods, qa's two
    # pending pods reclaim two of them.
    partition = partition_for(POOL, 8)
    caused_before, suffered_before = _evictions("caused", "qa"), _evictions("suffered", "qb")
    producer = make_producer(kafka_settings)
    await producer.start()

    async def send(topic: str, target: int, key: bytes, record: Model) -> Any:
        return await producer.send(topic, dumps(record), key=key, partition=target)

    try:
        for event in load_scenario((ROOT / "examples" / "reclaim.yaml").read_text()):
            await producer.send_and_wait(topics.cluster_events, dumps(event), key=b"default", partition=partition)
        records = [
            InRecord(r.partition, r.offset, r.key, r.value, r.timestamp)
            for r in await read_topic(kafka_settings, topics.cluster_events)
        ]
        runtime = SchedulerRuntime(kafka_settings, topics, SchedulerConfig(), send, partitions=8, metrics_interval_s=0)
        published = await runtime.process(records)
    finally:
        await producer.stop()
    evictions = [o.record for o in published if isinstance(o.record, EvictionRequested)]
    assert len(evictions) == 2 and {e.queue for e in evictions} == {"qb"}

    samples = await _scrape()
    gauges = {
        (name, dict(labels)["queue"]): value
        for (name, labels), value in samples.items()
        if name.startswith("kai_stream_queue_") and dict(labels).get("pool") == POOL
    }
    for queue in ("qa", "qb"):
        assert gauges[("kai_stream_queue_fair_share_gpu", queue)] == 2.0
    # as the cycle left them: qb's two reclaimed pods no longer count, qa's two pods pipelined on their GPUs do
    assert gauges[("kai_stream_queue_allocated_gpu", "qa")] == 2.0
    assert gauges[("kai_stream_queue_allocated_gpu", "qb")] == 2.0
    assert gauges[("kai_stream_queue_allocated_cpu_cores", "qb")] == 0.0, "the scenario's pods request no CPU"
    assert not any(name.endswith("fair_share") or name.endswith("allocated") for name, _ in gauges)
    assert _evictions("caused", "qa") - caused_before == 2
    assert _evictions("suffered", "qb") - suffered_before == 2
    assert _evictions("caused", "qb") == 0 and _evictions("suffered", "qa") == 0
