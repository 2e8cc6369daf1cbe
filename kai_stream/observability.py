"""Health and metrics for every component: one Prometheus registry, the metric definitions, and a small
aiohttp server with ``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics``.

Components import the metric objects from here (never define their own) and label them; e.g.::

    from kai_stream.observability import DECISIONS, Health, serve_health

    DECISIONS.labels(pool="a", kind="BindRequested", action="allocate").inc()
    health = Health("binder")
    health.set_condition("kafka", False)         # not ready until Kafka is reached
    runner = await serve_health(health, HealthSettings())

Liveness: ``/healthz`` answers 200 unless the component registered a heartbeat (``Health.beat``) and it is older
than ``stale_after_s``. Readiness: ``/readyz`` answers 200 when every registered condition is true.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

EVENTS_CONSUMED = Counter(
    "kai_stream_events_consumed",
    "Records consumed from a topic, by component, topic and event type.",
    ["component", "topic", "type"],
    registry=REGISTRY,
)
EVENTS_PUBLISHED = Counter(
    "kai_stream_events_published",
    "Records published to a topic, by component, topic and event type.",
    ["component", "topic", "type"],
    registry=REGISTRY,
)
DEAD_LETTERS = Counter(
    "kai_stream_dead_letters",
    "Records sent to the dead-letter topic, by component and source topic.",
    ["component", "topic"],
    registry=REGISTRY,
)
DECISIONS = Counter(
    "kai_stream_decisions",
    "Decisions emitted by the scheduler, by pool, kind (BindRequested, PodPending …) and action.",
    ["pool", "kind", "action"],
    registry=REGISTRY,
)
CYCLE_DURATION = Histogram(
    "kai_stream_cycle_duration_seconds",
    "Wall time of one scheduling cycle (folding excluded), by pool.",
    ["pool"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
QUEUE_UNITS: tuple[tuple[str, str, float], ...] = (
    ("gpu", "GPU devices", 1 / 1000),
    ("cpu_cores", "CPU cores", 1 / 1000),
    ("memory_bytes", "memory in bytes", 1.0),
)
"""Per resource (the schema's order: GPU, CPU, memory): the metric name's suffix, its unit, and the factor from the
schema's unit (milli-GPU, millicores, bytes) to the metric's."""
QUEUE_FAIR_SHARE: tuple[Gauge, ...] = tuple(
    Gauge(
        f"kai_stream_queue_fair_share_{suffix}",
        f"Fair share of a queue at the processor's last measured cycle, in {unit}.",
        ["pool", "queue"],
        registry=REGISTRY,
    )
    for suffix, unit, _ in QUEUE_UNITS
)
QUEUE_ALLOCATED: tuple[Gauge, ...] = tuple(
    Gauge(
        f"kai_stream_queue_allocated_{suffix}",
        f"Resources allocated to a queue as the processor's last measured cycle left them (its binds and "
        f"pipelined pods counted, its evictions not), in {unit}.",
        ["pool", "queue"],
        registry=REGISTRY,
    )
    for suffix, unit, _ in QUEUE_UNITS
)
EVICTIONS_CAUSED = Counter(
    "kai_stream_queue_evictions_caused",
    "Evictions the scheduler decided to make room for a job of this queue, by action (reclaim, preempt …).",
    ["pool", "queue", "action"],
    registry=REGISTRY,
)
EVICTIONS_SUFFERED = Counter(
    "kai_stream_queue_evictions_suffered",
    "Evictions the scheduler decided of a pod of this queue, by action (reclaim, preempt, stalegangeviction …).",
    ["pool", "queue", "action"],
    registry=REGISTRY,
)
CONSUMER_LAG = Gauge(
    "kai_stream_consumer_lag",
    "Records between a consumer's position and the partition's high-watermark.",
    ["component", "topic", "partition"],
    registry=REGISTRY,
)
BINDER_RETRIES = Counter(
    "kai_stream_binder_retries",
    "Kubernetes API calls the binder retried, by operation (bind, evict, patch) and reason.",
    ["operation", "reason"],
    registry=REGISTRY,
)
BINDER_OUTCOMES = Counter(
    "kai_stream_binder_outcomes",
    "Outcomes the binder published, by kind (PodBound, BindFailed, PodEvicted, EvictionFailed).",
    ["kind"],
    registry=REGISTRY,
)
GPU_READINGS = Counter(
    "kai_stream_gpu_readings",
    "NVML polls by the GPU agent, by node and result (ok or the NVML error name).",
    ["node", "result"],
    registry=REGISTRY,
)
GPU_HEALTHY = Gauge(
    "kai_stream_gpu_healthy",
    "1 when the GPU is healthy, 0 after a fatal XID or an uncorrectable ECC error.",
    ["node", "gpu", "uuid"],
    registry=REGISTRY,
)
GPU_TEMPERATURE = Gauge(
    "kai_stream_gpu_temperature_celsius",
    "GPU temperature from NVML.",
    ["node", "gpu"],
    registry=REGISTRY,
)
GPU_MEMORY_USED = Gauge(
    "kai_stream_gpu_memory_used_bytes",
    "GPU memory in use from NVML.",
    ["node", "gpu"],
    registry=REGISTRY,
)
GPU_UTILIZATION = Gauge(
    "kai_stream_gpu_utilization_ratio",
    "GPU compute utilization from NVML (0..1).",
    ["node", "gpu"],
    registry=REGISTRY,
)

def record_queue(pool: str, queue: str, fair_share: Sequence[int], allocated: Sequence[int]) -> None:
    """Set a queue's fair share and allocation (GPU, CPU, memory in the schema's units)."""
    for (_, _, factor), share_gauge, allocated_gauge, share, used in zip(
        QUEUE_UNITS, QUEUE_FAIR_SHARE, QUEUE_ALLOCATED, fair_share, allocated, strict=True
    ):
        share_gauge.labels(pool=pool, queue=queue).set(share * factor)
        allocated_gauge.labels(pool=pool, queue=queue).set(used * factor)


def record_eviction(pool: str, action: str, preemptor_queue: str | None, victim_queue: str | None) -> None:
    """Count one decided eviction against the queue it was made for and the queue whose pod it evicts."""
    if preemptor_queue:
        EVICTIONS_CAUSED.labels(pool=pool, queue=preemptor_queue, action=action).inc()
    if victim_queue:
        EVICTIONS_SUFFERED.labels(pool=pool, queue=victim_queue, action=action).inc()


DEFAULT_HEALTH_PORTS: dict[str, int] = {
    "connector": 8081,
    "processor": 8082,
    "binder": 8083,
    "gpu-agent": 8084,
    "history-sink": 8085,
}
"""Each component's own default port, so components on one host never collide (a container sets its own)."""


class HealthSettings(BaseSettings):
    """Where the health/metrics server listens (``KAI_STREAM_HEALTH_HOST`` / ``KAI_STREAM_HEALTH_PORT``).

    Loopback unless configured: the endpoints have no authentication (the Helm chart sets ``0.0.0.0`` for its
    probes). No port set: the component's own from ``DEFAULT_HEALTH_PORTS``; port 0 with ``serve_health``: any
    free port.
    """

    model_config = SettingsConfigDict(env_prefix="KAI_STREAM_HEALTH_", frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int | None = None
    enabled: bool = True

    def port_for(self, component: str) -> int:
        return self.port if self.port is not None else DEFAULT_HEALTH_PORTS.get(component, 8080)


class Health:
    """Liveness and readiness of one component, as the component reports them.

    Liveness fails when the main loop made no progress for ``stale_after_s`` (no ``beat``; a unit of work
    begun with ``working`` and not ``done`` for that long counts as stuck, whatever a timer's ``idle_beat``
    says), or when it failed (``failed``) ``max_failures`` times within ``failure_window_s``: crash-looping.
    """

    def __init__(
        self,
        component: str,
        *,
        stale_after_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_failures: int = 3,
        failure_window_s: float = 60.0,
    ) -> None:
        self.component = component
        self.stale_after_s = stale_after_s
        self.max_failures = max_failures
        self.failure_window_s = failure_window_s
        self._clock = clock
        self._last_beat: float | None = None
        self._working_since: float | None = None
        self._failures: deque[tuple[float, str]] = deque()
        self._conditions: dict[str, tuple[bool, str]] = {}

    def beat(self) -> None:
        """Record that the component's main loop made progress."""
        self._last_beat = self._clock()

    def working(self) -> None:
        """A unit of work (a batch) begins: until ``done``, only progress inside it keeps the component alive."""
        self._working_since = self._clock()

    def done(self) -> None:
        """The unit of work begun with ``working`` finished (or failed): progress."""
        self._working_since = None
        self.beat()

    def idle_beat(self) -> None:
        """A timer's beat: progress only while no unit of work is under way (waiting for input is fine)."""
        if self._working_since is None:
            self.beat()

    def failed(self, reason: str) -> None:
        """The main loop failed (and will be restarted in the process)."""
        now = self._clock()
        self._failures.append((now, reason))
        while self._failures and now - self._failures[0][0] > self.failure_window_s:
            self._failures.popleft()
        self._working_since = None

    def set_condition(self, name: str, ok: bool, detail: str = "") -> None:
        """Register or update one readiness condition (e.g. "kafka", "kubernetes", "caught-up")."""
        self._conditions[name] = (ok, detail)

    def alive(self) -> tuple[bool, str]:
        now = self._clock()
        recent = [reason for at, reason in self._failures if now - at <= self.failure_window_s]
        if len(recent) >= self.max_failures:
            return False, f"crash-looping: {len(recent)} failures in {self.failure_window_s:.0f}s, last: {recent[-1]}"
        if self.stale_after_s is None or self._last_beat is None:
            return True, "ok"
        if self._working_since is not None and now - self._working_since > self.stale_after_s:
            return False, f"stuck: one unit of work for {now - self._working_since:.1f}s"
        age = now - self._last_beat
        if age > self.stale_after_s:
            return False, f"no progress for {age:.1f}s (limit {self.stale_after_s:.1f}s)"
        return True, "ok"

    def ready(self) -> tuple[bool, dict[str, str]]:
        report = {
            name: ("ok" if ok else f"not ready: {detail}" if detail else "not ready")
            for name, (ok, detail) in sorted(self._conditions.items())
        }
        return all(ok for ok, _ in self._conditions.values()), report


def make_app(health: Health, registry: CollectorRegistry = REGISTRY) -> web.Application:
    """The aiohttp application serving ``/healthz``, ``/readyz`` and ``/metrics``."""

    async def healthz(_: web.Request) -> web.Response:
        ok, detail = health.alive()
        return web.json_response({"component": health.component, "status": detail}, status=200 if ok else 503)

    async def readyz(_: web.Request) -> web.Response:
        ok, report = health.ready()
        body = {"component": health.component, "ready": ok, "conditions": report}
        return web.json_response(body, status=200 if ok else 503)

    async def metrics(_: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


async def serve_health(
    health: Health, settings: HealthSettings | None = None, registry: CollectorRegistry = REGISTRY
) -> web.AppRunner:
    """Start the server in the running loop; stop it with ``await runner.cleanup()``."""
    settings = settings or HealthSettings()
    runner = web.AppRunner(make_app(health, registry), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.port_for(health.component)).start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The TCP port a started runner listens on (useful with ``port=0``)."""
    for site in runner.sites:
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            port: int = server.sockets[0].getsockname()[1]
            return port
    raise RuntimeError("the health server is not listening")
