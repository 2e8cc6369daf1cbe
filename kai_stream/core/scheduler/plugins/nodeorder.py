"""Node order: bin-pack (default) or spread, per resource type, from the config."""

from __future__ import annotations

from kai_stream.core.scheduler.framework.session import Session


class NodeOrderPlugin:
    name = "nodeorder"

    def on_session_open(self, session: Session) -> None:
        session.hooks.gpu_strategy = session.config.placement.gpu
        session.hooks.cpu_strategy = session.config.placement.cpu
