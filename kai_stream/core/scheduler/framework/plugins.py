"""Plugin protocol and the explicit, ordered plugin registry (no import-time discovery)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session


class Plugin(Protocol):
    name: str

    def on_session_open(self, session: Session) -> None: ...


PluginBuilder = Callable[[], Plugin]


def registry() -> dict[str, PluginBuilder]:
    """Every known plugin by name. Imported lazily so that plugins may import the framework."""
    from kai_stream.core.scheduler.plugins import (
        gang,
        gpusharing,
        minruntime,
        nodeorder,
        nomination,
        predicates,
        priority,
        proportion,
        topology,
    )

    return {
        "predicates": predicates.PredicatesPlugin,
        "gpusharing": gpusharing.GpuSharingPlugin,
        "nodeorder": nodeorder.NodeOrderPlugin,
        "proportion": proportion.ProportionPlugin,
        "gang": gang.GangPlugin,
        "priority": priority.PriorityPlugin,
        "topology": topology.TopologyPlugin,
        "minruntime": minruntime.MinRuntimePlugin,
        "nomination": nomination.NominationPlugin,
    }
