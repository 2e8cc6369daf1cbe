"""Scheduler plugins by name, in the default order (plugin order is hook order). Each registers hooks on a
session when it opens; the cycle builds the configured ones and hands them to the session."""

from __future__ import annotations

from kai_stream.core.scheduler.framework.plugins import Plugin, PluginBuilder
from kai_stream.core.scheduler.plugins import (
    aging,
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

__all__ = ["PLUGINS", "build_plugins"]

PLUGINS: dict[str, PluginBuilder] = {
    "predicates": predicates.PredicatesPlugin,
    "gpusharing": gpusharing.GpuSharingPlugin,
    "nodeorder": nodeorder.NodeOrderPlugin,
    "nomination": nomination.NominationPlugin,
    "proportion": proportion.ProportionPlugin,
    "topology": topology.TopologyPlugin,
    "priority": priority.PriorityPlugin,
    "gang": gang.GangPlugin,
    "minruntime": minruntime.MinRuntimePlugin,
    "aging": aging.AgingPlugin,
}
"""By default jobs already nominated (pipelined) by an earlier cycle go first (queues too), then job order is
priority, then gang (below minMember first), then age, then uid. ``aging`` (not KAI's) is off by default
(``config.OPTIONAL_PLUGINS``)."""


def build_plugins(names: tuple[str, ...]) -> list[Plugin]:
    """Fresh instances of the plugins ``names``, in that order (a session's plugins hold its state)."""
    return [PLUGINS[name]() for name in names]
