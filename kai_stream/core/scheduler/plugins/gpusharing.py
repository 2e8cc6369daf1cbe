"""GPU sharing: a GPU task needs a node with GPUs; a gpu-memory task needs a node whose GPU memory is known.

Fractions themselves share devices through the node index (most used device first when packing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai_stream.core.scheduler.framework.info import NodeInfo, TaskInfo

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session


def _has_gpus(task: TaskInfo, node: NodeInfo) -> str | None:
    needs_gpu = task.gpu_whole or task.gpu_frac or task.gpu_mem_mib
    if needs_gpu and not node.healthy:
        return "NoGPUs"
    if task.gpu_mem_mib and node.gpu_memory_mib <= 0:
        return "UnknownGPUMemory"
    if task.gpu_mem_mib and task.gpu_mem_mib > node.gpu_memory_mib:
        return "InsufficientGPUMemory"
    return None


class GpuSharingPlugin:
    name = "gpusharing"

    def on_session_open(self, session: Session) -> None:
        session.hooks.predicates.append(("GPUSharing", _has_gpus))
