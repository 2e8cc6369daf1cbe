"""The NVML agent against this machine's real NVML, whatever the machine is.

Where a GPU and its driver are present, the agent's reading must agree with ``nvidia-smi`` (count, UUIDs,
memory) and ``gpu-agent --once --print`` must print one decodable ``GpuHealthObserved`` for those GPUs. Where
none is, the reader must refuse with an actionable message and the command must exit 2 naming the node. One of
the two branches runs on every machine; neither is skipped.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import typer
from typer.testing import CliRunner

from kai_stream.cli.gpu_agent import EXIT_NO_NVML, gpu_agent
from kai_stream.connectors.nvml import GpuReader, NvmlUnavailable, PynvmlApi
from kai_stream.core.events import GpuHealthObserved, loads_cluster_event

ACTIONABLE = ("NVIDIA", "driver", "GPU", "libnvidia-ml")


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    app.command("gpu-agent")(gpu_agent)
    return app


def _nvidia_smi() -> list[tuple[str, int]] | None:
    """(uuid, total MiB) per GPU as nvidia-smi reports them, or None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout
    rows = [line.split(",") for line in out.strip().splitlines() if line.strip()]
    return [(uuid.strip(), int(total.strip())) for uuid, total in rows]


def _open_reader() -> GpuReader | NvmlUnavailable:
    reader = GpuReader(PynvmlApi())
    try:
        reader.open()
    except NvmlUnavailable as exc:
        return exc
    return reader


def test_reader_agrees_with_nvidia_smi_or_refuses_clearly() -> None:
    opened = _open_reader()
    smi = _nvidia_smi()
    if isinstance(opened, NvmlUnavailable):
        assert any(word in str(opened) for word in ACTIONABLE), str(opened)
        assert not smi, "nvidia-smi lists GPUs but NVML could not be opened"
        return
    try:
        devices = opened.read()
        assert len(devices) == opened.device_count > 0
        assert [d.index for d in devices] == list(range(len(devices)))
        for device in devices:
            assert device.uuid.startswith(("GPU-", "MIG-")), device.uuid
            assert device.memory_mib > 0 and 0 <= (device.memory_used_mib or 0) <= device.memory_mib
        if smi is not None:
            assert [d.uuid for d in devices] == [uuid for uuid, _ in smi]
            for device, (_, total_mib) in zip(devices, smi, strict=True):
                assert abs(device.memory_mib - total_mib) <= 1, (device.memory_mib, total_mib)
        uuids = {d.uuid for d in devices}
        assert all(event.uuid in uuids for event in opened.wait_xids(10))
    finally:
        opened.close()


def test_gpu_agent_once_prints_this_machines_gpus_or_exits_2() -> None:
    result = CliRunner().invoke(_cli(), ["gpu-agent", "--node", "this-node", "--once", "--print"])
    smi = _nvidia_smi()
    if result.exit_code == EXIT_NO_NVML:
        assert "this-node" in result.output
        assert any(word in result.output for word in ACTIONABLE), result.output
        assert not smi
        return
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, result.output
    event = loads_cluster_event(lines[0].encode())
    assert isinstance(event, GpuHealthObserved) and event.node == "this-node"
    assert len(event.gpus) > 0
    if smi is not None:
        assert [g.uuid for g in event.gpus] == [uuid for uuid, _ in smi]


@pytest.mark.parametrize("index", [0])
def test_reading_is_stable_across_two_polls(index: int) -> None:
    opened = _open_reader()
    if isinstance(opened, NvmlUnavailable):
        with pytest.raises(NvmlUnavailable):
            GpuReader(PynvmlApi()).open()
        return
    try:
        first, second = opened.read(), opened.read()
        assert first[index].uuid == second[index].uuid and first[index].memory_mib == second[index].memory_mib
    finally:
        opened.close()
