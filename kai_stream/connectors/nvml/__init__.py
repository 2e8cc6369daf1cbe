"""The NVML GPU agent: reads each GPU of a node through pynvml and publishes ``GpuHealthObserved`` events.

``seam`` (the NVML calls, real and recorded), ``reading`` (one poll and the health rule), ``agent`` (the loop).
"""

from kai_stream.connectors.nvml.agent import AgentConfig, GpuAgent, build_event, kafka_sink
from kai_stream.connectors.nvml.reading import FATAL_XIDS, GpuReader, NvmlUnavailable, health_of
from kai_stream.connectors.nvml.seam import MemoryInfo, Nvml, PynvmlApi, XidEvent

__all__ = [
    "FATAL_XIDS",
    "AgentConfig",
    "GpuAgent",
    "GpuReader",
    "MemoryInfo",
    "Nvml",
    "NvmlUnavailable",
    "PynvmlApi",
    "XidEvent",
    "build_event",
    "health_of",
    "kafka_sink",
]
