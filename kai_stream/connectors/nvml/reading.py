"""One NVML reading of a node's GPUs, and the health rule: a GPU with a fatal XID or uncorrectable ECC errors
is unhealthy (``GpuDevice.healthy=False``, ``reason`` says why).

``GpuReader`` owns the NVML session: it opens it (or raises ``NvmlUnavailable`` with a message a person can act
on), remembers fatal XIDs per GPU until the agent restarts (a driver reload or reboot clears them on the GPU
too), and turns each poll into ``GpuDevice`` values. Optional readings a GPU does not support stay ``None``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pynvml

from kai_stream.connectors.nvml.seam import Handle, Nvml, XidEvent
from kai_stream.core.events import GpuDevice

FATAL_XIDS: frozenset[int] = frozenset({48, 63, 64, 74, 79, 92, 94, 95})
"""XIDs after which no new work should land on the GPU: 48 double-bit ECC, 63/64 ECC page retirement or row
remapping event/failure, 74 NVLink error, 79 fallen off the bus, 92 high single-bit ECC rate, 94 contained and
95 uncontained ECC error (NVIDIA's XID catalog)."""

MIB = 1024 * 1024
T = TypeVar("T")


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine (no library, no driver, no GPU): the agent must not run."""


def error_name(exc: BaseException) -> str:
    """``NVMLError_GpuIsLost`` -> ``GpuIsLost``; any other exception -> its class name."""
    return type(exc).__name__.removeprefix("NVMLError_")


_HINTS: dict[type[BaseException], str] = {
    pynvml.NVMLError_LibraryNotFound: (
        "the NVML library (libnvidia-ml.so.1) was not found: is the NVIDIA driver installed, and does the "
        "container run with the NVIDIA runtime (runtimeClassName: nvidia)?"
    ),
    pynvml.NVMLError_DriverNotLoaded: "the NVIDIA kernel driver is not loaded (is this a GPU node?)",
    pynvml.NVMLError_NoPermission: "no permission to open the NVIDIA device files (/dev/nvidia*)",
}


def _optional(call: Callable[[], T]) -> T | None:
    """A reading the device may not offer: None when NVML says it is not supported or not permitted."""
    try:
        return call()
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_NoPermission, pynvml.NVMLError_FunctionNotFound):
        return None


def health_of(ecc_uncorrectable: int | None, xids: tuple[int, ...], fatal_xids: frozenset[int]) -> tuple[bool, str]:
    """The health rule: (healthy, reason)."""
    reasons = [f"fatal XID {xid}" for xid in sorted(set(xids) & fatal_xids)]
    if ecc_uncorrectable:
        reasons.append(f"{ecc_uncorrectable} uncorrectable ECC error(s)")
    return (not reasons, "; ".join(reasons))


@dataclass
class _Slot:
    index: int
    handle: Handle | None
    uuid: str = ""
    open_error: str = ""


class GpuReader:
    """Reads every GPU of this node through ``Nvml``; see the module docstring."""

    def __init__(self, api: Nvml, *, fatal_xids: frozenset[int] = FATAL_XIDS) -> None:
        self.api = api
        self.fatal_xids = fatal_xids
        self.driver_version = ""
        self.xid_supported = False
        self.xid_error = ""
        self._slots: list[_Slot] = []
        self._xids: dict[str, list[int]] = {}

    def open(self) -> None:
        try:
            self.api.init()
        except pynvml.NVMLError as exc:
            hint = _HINTS.get(type(exc), "NVML failed to initialise")
            raise NvmlUnavailable(f"NVML unavailable ({error_name(exc)}: {exc}): {hint}") from exc
        try:
            count = self.api.device_count()
            self.driver_version = _optional(self.api.driver_version) or ""
        except pynvml.NVMLError as exc:
            self.api.shutdown()
            raise NvmlUnavailable(f"NVML could not count GPUs ({error_name(exc)}: {exc})") from exc
        if count == 0:
            self.api.shutdown()
            raise NvmlUnavailable("NVML found no NVIDIA GPU on this node")
        self._slots = [self._open_slot(index) for index in range(count)]
        handles = [slot.handle for slot in self._slots if slot.handle is not None]
        try:
            self.api.watch_xids(handles)
            self.xid_supported = True
        except pynvml.NVMLError:
            self.xid_supported = False

    @property
    def device_count(self) -> int:
        return len(self._slots)

    def _open_slot(self, index: int) -> _Slot:
        try:
            handle = self.api.handle(index)
            return _Slot(index, handle, uuid=self.api.uuid(handle))
        except pynvml.NVMLError as exc:
            return _Slot(index, None, open_error=f"NVML {error_name(exc)}")

    def close(self) -> None:
        with contextlib.suppress(pynvml.NVMLError):
            self.api.shutdown()

    def record_xid(self, event: XidEvent) -> bool:
        """Remember an XID for its GPU; True when it is fatal."""
        self._xids.setdefault(event.uuid, []).append(event.xid)
        return event.xid in self.fatal_xids

    def wait_xids(self, timeout_ms: int) -> list[XidEvent]:
        """Block up to ``timeout_ms`` for XID events, then drain what is queued; each is recorded.

        If NVML fails while waiting, XID events are switched off (``xid_error`` says why) and polling goes on.
        """
        if not self.xid_supported:
            return []
        events: list[XidEvent] = []
        try:
            event = self.api.wait_xid(timeout_ms)
            while event is not None:
                self.record_xid(event)
                events.append(event)
                event = self.api.wait_xid(0)
        except pynvml.NVMLError as exc:
            self.xid_supported = False
            self.xid_error = f"XID events stopped ({error_name(exc)}); polling only"
        return events

    def read(self) -> tuple[GpuDevice, ...]:
        return tuple(self._read_slot(slot) for slot in self._slots)

    def _read_slot(self, slot: _Slot) -> GpuDevice:
        if slot.handle is None:
            return GpuDevice(index=slot.index, healthy=False, reason=slot.open_error)
        handle = slot.handle
        try:
            memory = self.api.memory(handle)
            utilization = _optional(lambda: self.api.utilization_pct(handle))
            temperature = _optional(lambda: self.api.temperature_c(handle))
            ecc = _optional(lambda: self.api.ecc_uncorrectable(handle))
        except pynvml.NVMLError as exc:
            xids = tuple(self._xids.get(slot.uuid, ()))
            _, xid_reason = health_of(None, xids, self.fatal_xids)
            reason = "; ".join(r for r in (f"NVML {error_name(exc)}", xid_reason) if r)
            return GpuDevice(index=slot.index, uuid=slot.uuid, healthy=False, reason=reason, xids=xids)
        xids = tuple(self._xids.get(slot.uuid, ()))
        healthy, reason = health_of(ecc, xids, self.fatal_xids)
        return GpuDevice(
            index=slot.index,
            uuid=slot.uuid,
            memory_mib=memory.total // MIB,
            memory_used_mib=memory.used // MIB,
            utilization_pct=utilization,
            temperature_c=temperature,
            ecc_uncorrectable=ecc,
            xids=xids,
            healthy=healthy,
            reason=reason,
        )
