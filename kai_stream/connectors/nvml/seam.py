"""The NVML seam: the few NVML calls the GPU agent makes, as a Protocol, and its pynvml implementation.

Tests drive the agent through a recorded implementation of ``Nvml``; production uses ``PynvmlApi``. Errors are
pynvml's own ``NVMLError`` subclasses (``NVMLError_LibraryNotFound``, ``NVMLError_GpuIsLost`` …) in both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import pynvml

Handle = Any


@dataclass(frozen=True)
class MemoryInfo:
    total: int
    used: int


@dataclass(frozen=True)
class XidEvent:
    uuid: str
    xid: int


class Nvml(Protocol):
    """What the agent needs from NVML. Every call may raise ``pynvml.NVMLError`` (a subclass of it)."""

    def init(self) -> None: ...

    def shutdown(self) -> None: ...

    def driver_version(self) -> str: ...

    def device_count(self) -> int: ...

    def handle(self, index: int) -> Handle: ...

    def name(self, handle: Handle) -> str: ...

    def uuid(self, handle: Handle) -> str: ...

    def memory(self, handle: Handle) -> MemoryInfo: ...

    def utilization_pct(self, handle: Handle) -> float: ...

    def temperature_c(self, handle: Handle) -> int: ...

    def ecc_uncorrectable(self, handle: Handle) -> int: ...

    def watch_xids(self, handles: list[Handle]) -> None:
        """Subscribe to critical XID events of these devices (raises ``NVMLError_NotSupported`` if none can)."""
        ...

    def wait_xid(self, timeout_ms: int) -> XidEvent | None:
        """The next XID event, or None when ``timeout_ms`` passed without one."""
        ...


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class PynvmlApi:
    """``Nvml`` over the real NVML library (libnvidia-ml.so.1) via pynvml."""

    def __init__(self) -> None:
        self._event_set: Any = None

    def init(self) -> None:
        pynvml.nvmlInit()

    def shutdown(self) -> None:
        if self._event_set is not None:
            pynvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        pynvml.nvmlShutdown()

    def driver_version(self) -> str:
        return _text(pynvml.nvmlSystemGetDriverVersion())

    def device_count(self) -> int:
        count: int = pynvml.nvmlDeviceGetCount()
        return count

    def handle(self, index: int) -> Handle:
        return pynvml.nvmlDeviceGetHandleByIndex(index)

    def name(self, handle: Handle) -> str:
        return _text(pynvml.nvmlDeviceGetName(handle))

    def uuid(self, handle: Handle) -> str:
        return _text(pynvml.nvmlDeviceGetUUID(handle))

    def memory(self, handle: Handle) -> MemoryInfo:
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return MemoryInfo(total=int(info.total), used=int(info.used))

    def utilization_pct(self, handle: Handle) -> float:
        return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)

    def temperature_c(self, handle: Handle) -> int:
        return int(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))

    def ecc_uncorrectable(self, handle: Handle) -> int:
        return int(
            pynvml.nvmlDeviceGetTotalEccErrors(
                handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
            )
        )

    def watch_xids(self, handles: list[Handle]) -> None:
        event_set = pynvml.nvmlEventSetCreate()
        registered = 0
        for handle in handles:
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
            except pynvml.NVMLError_NotSupported:
                continue
            registered += 1
        if registered == 0:
            pynvml.nvmlEventSetFree(event_set)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._event_set = event_set

    def wait_xid(self, timeout_ms: int) -> XidEvent | None:
        if self._event_set is None:
            return None
        try:
            data = pynvml.nvmlEventSetWait_v2(self._event_set, timeout_ms)
        except pynvml.NVMLError_Timeout:
            return None
        return XidEvent(uuid=_text(pynvml.nvmlDeviceGetUUID(data.device)), xid=int(data.eventData))
