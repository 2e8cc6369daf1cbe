"""The NVML agent through a recorded NVML: healthy, degraded (XID, ECC, lost GPU, unsupported fields), missing."""

from __future__ import annotations

import asyncio

import pynvml
import pytest
import typer
from typer.testing import CliRunner

from kai_stream.connectors.nvml import AgentConfig, GpuAgent, GpuReader, NvmlUnavailable, XidEvent
from kai_stream.connectors.nvml.reading import health_of
from kai_stream.core.events import GpuHealthObserved, loads_cluster_event
from kai_stream.observability import Health

from .recorded import Gpu, RecordedNvml, nvml_error


def _two_gpus() -> list[Gpu]:
    return [Gpu(uuid="GPU-aaaa"), Gpu(uuid="GPU-bbbb", utilization=0.0, temperature=30)]


class Collect:
    def __init__(self) -> None:
        self.events: list[GpuHealthObserved] = []

    async def __call__(self, event: GpuHealthObserved) -> None:
        self.events.append(event)


def _agent(api: RecordedNvml, clock: list[float], resync_s: float = 300.0) -> tuple[GpuAgent, Collect]:
    reader = GpuReader(api)
    reader.open()
    sink = Collect()
    config = AgentConfig(node="gpu-node-1", pool="pool-a", resync_s=resync_s)
    return GpuAgent(reader, config, sink, clock=lambda: clock[0]), sink


async def test_healthy_node_publishes_every_reading_keyed_by_pool() -> None:
    agent, sink = _agent(RecordedNvml(_two_gpus()), [1000.0])
    event = await agent.poll_once()
    assert event is not None and sink.events == [event]
    assert (event.node, event.pool, event.ts) == ("gpu-node-1", "pool-a", 1000.0)
    first, second = event.gpus
    assert (first.index, first.uuid, first.memory_mib, first.memory_used_mib) == (0, "GPU-aaaa", 81920, 2048)
    assert (first.utilization_pct, first.temperature_c, first.ecc_uncorrectable) == (37.0, 41, 0)
    assert first.healthy and second.healthy and first.reason == ""
    assert event.utilization_pct == (37.0, 0.0)
    assert loads_cluster_event(event.model_dump_json().encode()) == event


async def test_unchanged_health_is_not_republished_until_resync() -> None:
    api = RecordedNvml(_two_gpus())
    clock = [0.0]
    agent, sink = _agent(api, clock, resync_s=60.0)
    await agent.poll_once()
    api.gpus[0].utilization = 99.0
    clock[0] = 10.0
    assert await agent.poll_once() is None
    clock[0] = 61.0
    assert await agent.poll_once() is not None
    assert [e.ts for e in sink.events] == [0.0, 61.0]


async def test_fatal_xid_marks_that_gpu_unhealthy_and_publishes_at_once() -> None:
    api = RecordedNvml(_two_gpus())
    clock = [0.0]
    agent, _ = _agent(api, clock)
    await agent.poll_once()
    api.xids.extend([XidEvent("GPU-bbbb", 13), XidEvent("GPU-bbbb", 79)])
    events = agent.reader.wait_xids(100)
    assert [e.xid for e in events] == [13, 79]
    clock[0] = 1.0
    event = await agent.poll_once()
    assert event is not None
    assert event.gpus[0].healthy
    assert not event.gpus[1].healthy
    assert event.gpus[1].reason == "fatal XID 79"
    assert event.gpus[1].xids == (13, 79)


async def test_non_fatal_xid_alone_keeps_the_gpu_healthy() -> None:
    api = RecordedNvml(_two_gpus())
    agent, _ = _agent(api, [0.0])
    api.xids.append(XidEvent("GPU-aaaa", 13))
    agent.reader.wait_xids(0)
    event = await agent.poll_once()
    assert event is not None and event.gpus[0].healthy and event.gpus[0].xids == (13,)


async def test_uncorrectable_ecc_errors_make_the_gpu_unhealthy() -> None:
    gpus = _two_gpus()
    gpus[0].ecc = 2
    agent, _ = _agent(RecordedNvml(gpus), [0.0])
    event = await agent.poll_once()
    assert event is not None
    assert not event.gpus[0].healthy
    assert event.gpus[0].reason == "2 uncorrectable ECC error(s)"
    assert event.gpus[0].ecc_uncorrectable == 2


async def test_unsupported_optional_readings_stay_unknown_and_do_not_hurt_health() -> None:
    not_supported = nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert isinstance(not_supported, pynvml.NVMLError_NotSupported)
    gpu = Gpu(uuid="GPU-cccc", ecc=not_supported, temperature=not_supported, utilization=not_supported)
    agent, _ = _agent(RecordedNvml([gpu], xid_supported=False), [0.0])
    assert agent.reader.xid_supported is False
    assert agent.reader.wait_xids(10) == []
    event = await agent.poll_once()
    assert event is not None
    (device,) = event.gpus
    assert device.healthy
    assert (device.ecc_uncorrectable, device.temperature_c, device.utilization_pct) == (None, None, None)
    assert device.memory_mib == 80 * 1024


async def test_gpu_lost_during_a_poll_is_unhealthy_with_the_nvml_reason() -> None:
    api = RecordedNvml(_two_gpus())
    agent, _ = _agent(api, [0.0])
    await agent.poll_once()
    api.gpus[1].memory = nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
    event = await agent.poll_once()
    assert event is not None
    assert event.gpus[0].healthy
    assert (event.gpus[1].healthy, event.gpus[1].reason, event.gpus[1].uuid) == (False, "NVML GpuIsLost", "GPU-bbbb")


async def test_gpu_whose_handle_cannot_be_opened_is_reported_unhealthy() -> None:
    gpus = _two_gpus()
    gpus[0].handle_error = nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
    agent, _ = _agent(RecordedNvml(gpus), [0.0])
    event = await agent.poll_once()
    assert event is not None
    assert [(g.index, g.healthy, g.reason) for g in event.gpus] == [(0, False, "NVML GpuIsLost"), (1, True, "")]


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
    ],
)
def test_missing_nvml_raises_a_clear_error(code: int, needle: str) -> None:
    reader = GpuReader(RecordedNvml([], init_error=nvml_error(code)))
    with pytest.raises(NvmlUnavailable, match=needle):
        reader.open()


def test_no_gpu_is_an_error_not_a_silent_no_op() -> None:
    api = RecordedNvml([])
    with pytest.raises(NvmlUnavailable, match="no NVIDIA GPU"):
        GpuReader(api).open()
    assert api.calls == ["init", "shutdown"]


def test_health_rule_names_every_reason() -> None:
    fatal = frozenset({48, 79})
    assert health_of(0, (13,), fatal) == (True, "")
    assert health_of(None, (), fatal) == (True, "")
    assert health_of(1, (79, 48, 79), fatal) == (False, "fatal XID 48; fatal XID 79; 1 uncorrectable ECC error(s)")


def test_cli_exits_non_zero_with_a_message_where_there_is_no_nvml() -> None:
    """This machine has no NVIDIA driver: the real pynvml seam must fail loudly."""
    from kai_stream.cli.gpu_agent import gpu_agent

    app = typer.Typer()
    app.callback()(lambda: None)
    app.command("gpu-agent")(gpu_agent)

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # a machine with a GPU: the agent must read it instead
        pynvml.nvmlShutdown()
        result = CliRunner().invoke(app, ["gpu-agent", "--node", "n1", "--once", "--print"])
        assert result.exit_code == 0, result.output
        assert loads_cluster_event(result.stdout.strip().splitlines()[-1].encode()).type == "GpuHealthObserved"
        return
    result = CliRunner().invoke(app, ["gpu-agent", "--node", "n1", "--once", "--print"])
    assert result.exit_code == 2
    assert "node n1: NVML unavailable" in result.output
    assert "libnvidia-ml.so.1" in result.output


async def test_run_loop_publishes_a_fatal_xid_without_waiting_for_the_interval() -> None:
    api = RecordedNvml(_two_gpus())
    reader = GpuReader(api)
    reader.open()
    stop = asyncio.Event()
    sent: list[GpuHealthObserved] = []

    async def sink(event: GpuHealthObserved) -> None:
        sent.append(event)
        if len(sent) == 1:
            api.xids.append(XidEvent("GPU-aaaa", 48))
        else:
            stop.set()

    agent = GpuAgent(reader, AgentConfig(node="n", interval_s=60.0), sink, health=Health("gpu-agent"))
    await asyncio.wait_for(agent.run(stop), timeout=5.0)
    assert [[g.healthy for g in e.gpus] for e in sent] == [[True, True], [False, True]]
    assert sent[1].gpus[0].reason == "fatal XID 48"


async def test_run_loop_survives_a_failing_sink_and_reports_not_ready() -> None:
    reader = GpuReader(RecordedNvml(_two_gpus(), xid_supported=False))
    reader.open()
    stop = asyncio.Event()
    health = Health("gpu-agent")
    calls: list[float] = []

    async def sink(event: GpuHealthObserved) -> None:
        calls.append(event.ts)
        if len(calls) == 1:
            raise ConnectionError("broker away")
        stop.set()

    agent = GpuAgent(reader, AgentConfig(node="n", interval_s=0.1), sink, health=health)
    await asyncio.wait_for(agent.run(stop), timeout=5.0)
    assert len(calls) == 2, "the unchanged reading is republished after the failure"
    assert health.ready() == (True, {"publish": "ok"})


def test_xid_wait_failure_falls_back_to_polling() -> None:
    api = RecordedNvml(_two_gpus())
    reader = GpuReader(api)
    reader.open()

    def broken(timeout_ms: int) -> XidEvent | None:
        raise nvml_error(pynvml.NVML_ERROR_UNKNOWN)

    api.wait_xid = broken  # type: ignore[method-assign]
    assert reader.wait_xids(10) == []
    assert (reader.xid_supported, reader.xid_error) == (False, "XID events stopped (Unknown); polling only")
