"""What a test parametrized over the embedded broker engines receives (the ``engine`` fixture in conftest)."""

from __future__ import annotations

from dataclasses import dataclass

from kai_stream.engines import Engine
from kai_stream.settings import KafkaSettings


@dataclass(frozen=True)
class EngineUnderTest:
    """One embedded engine's session broker and settings for it."""

    name: Engine
    settings: KafkaSettings

    @property
    def is_kafka(self) -> bool:
        return self.name == "kafka"
