"""The scheduler configuration: one frozen pydantic model, its loader and its hash.

The core never reads the environment; ``load_config`` reads one YAML/JSON file and fails fast with a
message naming the bad field. ``config_hash`` (sha256 of the canonical JSON) is stamped on every decision.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal, get_args

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kai_stream.core.events import ActionName
from kai_stream.core.scheduler.plugins import PLUGINS

__all__ = ["DEFAULT_ACTIONS", "DEFAULT_PLUGINS", "PlacementConfig", "SchedulerConfig", "config_hash", "load_config"]

DEFAULT_ACTIONS: tuple[ActionName, ...] = get_args(ActionName)
"""Every action (``scheduler.actions.ACTIONS``), in the order KAI runs them."""
DEFAULT_PLUGINS: tuple[str, ...] = tuple(PLUGINS)
"""Every plugin (``scheduler.plugins.PLUGINS``), in its registry order (plugin order is hook order)."""

Strategy = Literal["binpack", "spread"]


class PlacementConfig(BaseModel):
    """Node/GPU ordering strategy per resource type (KAI's binpack | spread)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: Strategy = "binpack"
    cpu: Strategy = "binpack"


class SchedulerConfig(BaseModel):
    """Everything that changes decisions besides the events. Hashed into every decision."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scheduler_name: str = "kai-scheduler"
    actions: tuple[ActionName, ...] = DEFAULT_ACTIONS
    plugins: tuple[str, ...] = DEFAULT_PLUGINS
    placement: PlacementConfig = PlacementConfig()
    stale_gang_grace_s: float = Field(default=60.0, ge=0)
    usage_decay_k: float = Field(
        default=0.0,
        ge=0,
        description="k in w + k(w - u) for over-quota weights; u (decayed usage) is 0 until usage is tracked",
    )
    max_consolidation_preemptees: int = Field(default=16, ge=0)
    default_queue: str = "default-queue"
    preempt_min_runtime_s: float = Field(
        default=0.0,
        description="the pool's preempt min-runtime where no queue from the victim's leaf up sets one "
        "(seconds; -1 never, 0 none)",
    )
    reclaim_min_runtime_s: float = Field(
        default=0.0,
        description="the pool's reclaim min-runtime where no queue on the resolution path sets one "
        "(seconds; -1 never, 0 none)",
    )
    bind_backoff_s: float = Field(
        default=1.0,
        ge=0,
        le=86_400,
        description="after a failed bind the pod is not placed again for this long (event time, seconds), "
        "doubled with each further failure in a row",
    )
    bind_backoff_max_s: float = Field(default=60.0, ge=0, le=86_400, description="the longest bind back-off")

    @field_validator("actions")
    @classmethod
    def _unique_actions(cls, value: tuple[ActionName, ...]) -> tuple[ActionName, ...]:
        if len(set(value)) != len(value):
            raise ValueError("actions must not repeat")
        return value

    @field_validator("preempt_min_runtime_s", "reclaim_min_runtime_s")
    @classmethod
    def _min_runtime(cls, value: float) -> float:
        if value < 0 and value != -1:
            raise ValueError(f"must be -1 (never) or >= 0, got {value!r}")
        return value

    @field_validator("plugins")
    @classmethod
    def _known_plugins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - PLUGINS.keys())
        if unknown:
            raise ValueError(f"unknown plugins {unknown}; known: {list(PLUGINS)}")
        if len(set(value)) != len(value):
            raise ValueError("plugins must not repeat")
        return value


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "<root>"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def parse_config(data: object, source: str = "config") -> SchedulerConfig:
    """Validate a mapping into a ``SchedulerConfig``; ``ValueError`` names the bad field(s)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return SchedulerConfig.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{source}: {_describe(exc)}") from None


def load_config(path: str | Path) -> SchedulerConfig:
    """Read a YAML (or JSON) config file and validate it, failing fast with the bad field named."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ValueError(f"{file}: cannot read config: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{file}: cannot read config: not a text file (UTF-8 YAML expected)") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{file}: not valid YAML: {exc}") from None
    return parse_config(data, str(file))


def config_hash(config: SchedulerConfig) -> str:
    """SHA-256 of the canonical JSON of ``config`` (sorted keys)."""
    return hashlib.sha256(orjson.dumps(config.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)).hexdigest()
