"""The health server answers liveness, readiness and Prometheus metrics over real HTTP."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kai_stream.observability import (
    CYCLE_DURATION,
    DECISIONS,
    Health,
    HealthSettings,
    bound_port,
    record_queue,
    serve_health,
)


async def test_readyz_follows_conditions_and_healthz_follows_heartbeat() -> None:
    now = [100.0]
    health = Health("binder", stale_after_s=5.0, clock=lambda: now[0])
    health.set_condition("kafka", False, "connecting")
    runner = await serve_health(health, HealthSettings(host="127.0.0.1", port=0))
    base = f"http://127.0.0.1:{bound_port(runner)}"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 503
                assert (await resp.json())["conditions"] == {"kafka": "not ready: connecting"}
            health.set_condition("kafka", True)
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 200
            health.beat()
            async with http.get(f"{base}/healthz") as resp:
                assert resp.status == 200
            now[0] += 6.0
            async with http.get(f"{base}/healthz") as resp:
                assert resp.status == 503
                assert "no progress" in (await resp.json())["status"]
    finally:
        await runner.cleanup()


async def test_metrics_endpoint_exposes_labelled_samples_in_metric_units() -> None:
    DECISIONS.labels(pool="obs-test", kind="BindRequested", action="allocate").inc(3)
    CYCLE_DURATION.labels(pool="obs-test").observe(0.02)
    record_queue("obs-test", "team-a", fair_share=(2500, 1500, 2**30), allocated=(1000, 500, 0))
    runner = await serve_health(Health("processor"), HealthSettings(host="127.0.0.1", port=0))
    try:
        url = f"http://127.0.0.1:{bound_port(runner)}/metrics"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = await resp.text()
    finally:
        await runner.cleanup()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("kai_stream_decisions_total", (("action", "allocate"), ("kind", "BindRequested"),
                                                   ("pool", "obs-test")))] >= 3
    labels = (("pool", "obs-test"), ("queue", "team-a"))
    assert samples[("kai_stream_queue_fair_share_gpu", labels)] == 2.5
    assert samples[("kai_stream_queue_fair_share_cpu_cores", labels)] == 1.5
    assert samples[("kai_stream_queue_fair_share_memory_bytes", labels)] == 2**30
    assert samples[("kai_stream_queue_allocated_gpu", labels)] == 1.0
    assert samples[("kai_stream_queue_allocated_cpu_cores", labels)] == 0.5
    bucket = ("kai_stream_cycle_duration_seconds_bucket", (("le", "0.025"), ("pool", "obs-test")))
    assert samples[bucket] >= 1
