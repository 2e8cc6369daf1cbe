"""Node order (KAI's nodeorder): bin-pack (default) or spread, per resource type, from the config.

Bin-pack fills the fullest nodes and devices first (fewest free whole GPUs, the most used device for a fraction,
least left); spread the emptiest (most free whole GPUs, an idle device before a shared one, then the least used,
most left). The GPU strategy orders GPU tasks, the CPU strategy CPU-only ones. The node index walks its
structures in this order (``framework.hooks.NodeOrder``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai_stream.core.scheduler.framework.nodeindex import FirstFit

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session


class PlacementOrder(FirstFit):
    """Bin-pack is the node index's own first-fit order; spread reverses each preference."""

    def __init__(self, gpu_spread: bool, cpu_spread: bool) -> None:
        self.gpu_spread, self.cpu_spread = gpu_spread, cpu_spread

    def gpu_buckets(self, need: int, size: int) -> range:
        return range(size - 1, need - 1, -1) if self.gpu_spread else range(need, size)

    def shared_first(self) -> bool:
        return not self.gpu_spread

    def devices(self, fitting: list[tuple[int, int]], count: int) -> tuple[int, ...]:
        if not self.gpu_spread:
            return super().devices(fitting, count)
        if count == 1:
            return (max(fitting, key=lambda x: (x[0], -x[1]))[1],)
        return tuple(sorted(g for _, g in sorted(fitting, key=lambda x: (-x[0], x[1]))[:count]))

    def leftover(self, left: int, gpu_task: bool) -> int:
        return -left if (self.gpu_spread if gpu_task else self.cpu_spread) else left


class NodeOrderPlugin:
    name = "nodeorder"

    def on_session_open(self, session: Session) -> None:
        placement = session.config.placement
        session.hooks.node_order = PlacementOrder(placement.gpu == "spread", placement.cpu == "spread")
