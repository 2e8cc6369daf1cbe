"""A recorded NVML: per-GPU readings (values, or pynvml errors to raise) and queued XID events."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pynvml

from kai_stream.connectors.nvml.seam import Handle, MemoryInfo, XidEvent

GIB = 1024**3


def nvml_error(code: int) -> pynvml.NVMLError:
    """The pynvml exception for an NVML return code (e.g. NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost)."""
    return pynvml.NVMLError(code)


@dataclass
class Gpu:
    """What one GPU answers; a field set to an exception is raised by the matching call."""

    uuid: Any = "GPU-0"
    name: Any = "NVIDIA H100 80GB HBM3"
    memory: Any = field(default_factory=lambda: MemoryInfo(total=80 * GIB, used=2 * GIB))
    utilization: Any = 37.0
    temperature: Any = 41
    ecc: Any = 0
    handle_error: Any = None


def _answer(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


class RecordedNvml:
    """Implements ``kai_stream.connectors.nvml.seam.Nvml`` from recorded readings."""

    def __init__(
        self,
        gpus: list[Gpu],
        *,
        init_error: BaseException | None = None,
        xid_supported: bool = True,
        driver: str = "580.95.05",
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.xid_supported = xid_supported
        self.driver = driver
        self.xids: deque[XidEvent] = deque()
        self.calls: list[str] = []

    def init(self) -> None:
        self.calls.append("init")
        _answer(self.init_error)

    def shutdown(self) -> None:
        self.calls.append("shutdown")

    def driver_version(self) -> str:
        return str(_answer(self.driver))

    def device_count(self) -> int:
        return len(self.gpus)

    def handle(self, index: int) -> Handle:
        _answer(self.gpus[index].handle_error)
        return index

    def name(self, handle: Handle) -> str:
        return str(_answer(self.gpus[handle].name))

    def uuid(self, handle: Handle) -> str:
        return str(_answer(self.gpus[handle].uuid))

    def memory(self, handle: Handle) -> MemoryInfo:
        info: MemoryInfo = _answer(self.gpus[handle].memory)
        return info

    def utilization_pct(self, handle: Handle) -> float:
        return float(_answer(self.gpus[handle].utilization))

    def temperature_c(self, handle: Handle) -> int:
        return int(_answer(self.gpus[handle].temperature))

    def ecc_uncorrectable(self, handle: Handle) -> int:
        return int(_answer(self.gpus[handle].ecc))

    def watch_xids(self, handles: list[Handle]) -> None:
        if not self.xid_supported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def wait_xid(self, timeout_ms: int) -> XidEvent | None:
        return self.xids.popleft() if self.xids else None
