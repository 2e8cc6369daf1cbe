"""The plugin protocol: what a session asks of a plugin when it opens. The registry is ``scheduler.plugins``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session


class Plugin(Protocol):
    name: str

    def on_session_open(self, session: Session) -> None: ...


PluginBuilder = Callable[[], Plugin]
