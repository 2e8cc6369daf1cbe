"""The scheduler configuration: one frozen pydantic model, its loader and its hash.

The core never reads the environment; ``load_config`` reads one YAML/JSON file and fails fast with a
message naming the bad field. ``config_hash`` (sha256 of the canonical JSON) is stamped on every decision.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, get_args

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kai_stream.core.events import ActionName
from kai_stream.core.scheduler.plugins import PLUGINS
from kai_stream.core.usage import RETAIN_S

__all__ = [
    "DEFAULT_ACTIONS",
    "DEFAULT_PLUGINS",
    "OPTIONAL_PLUGINS",
    "JobAging",
    "PlacementConfig",
    "SchedulerConfig",
    "UsageParams",
    "config_hash",
    "load_config",
]

DEFAULT_ACTIONS: tuple[ActionName, ...] = get_args(ActionName)
"""Every action (``scheduler.actions.ACTIONS``), in the order KAI runs them."""
OPTIONAL_PLUGINS: tuple[str, ...] = ("aging",)
"""Plugins KAI does not have: off unless configured (``jobAging`` or named in ``plugins``)."""
DEFAULT_PLUGINS: tuple[str, ...] = tuple(name for name in PLUGINS if name not in OPTIONAL_PLUGINS)
"""Every plugin of KAI (``scheduler.plugins.PLUGINS`` less ``OPTIONAL_PLUGINS``), in registry order (plugin order is
hook order)."""

Strategy = Literal["binpack", "spread"]


class PlacementConfig(BaseModel):
    """Node/GPU ordering strategy per resource type (KAI's binpack | spread)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: Strategy = "binpack"
    cpu: Strategy = "binpack"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}


def parse_duration(value: object) -> object:
    """Seconds from a number or a duration string as KAI writes them (``10m``, ``1w``, ``1h30m``)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {value!r} (a number of seconds, or like 90s, 10m, 1h30m, 1w)")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


class UsageParams(BaseModel):
    """Time-based fair share's usage window, with KAI's ``usageDBConfig.usageParams`` names (snake_case accepted).

    The usage is computed by the fold from the log (``kai_stream.core.usage``), never queried from Prometheus."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    window_size_s: float = Field(
        default=604_800.0, gt=0, le=RETAIN_S, alias="windowSize", description="seconds of usage considered (1w)"
    )
    window_type: Literal["sliding", "tumbling"] = Field(default="sliding", alias="windowType")
    half_life_period_s: float | None = Field(
        default=None, alias="halfLifePeriod", description="usage decay half-life (seconds); unset or <= 0: no decay"
    )
    tumbling_window_start_time: float | None = Field(
        default=None, alias="tumblingWindowStartTime", description="epoch seconds a tumbling window is counted from"
    )

    @field_validator("window_size_s", "half_life_period_s", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        return parse_duration(value)

    @field_validator("tumbling_window_start_time", mode="before")
    @classmethod
    def _time(cls, value: object) -> object:
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                raise ValueError(f"not an RFC 3339 time: {value!r}") from None
        return value

    @model_validator(mode="after")
    def _window(self) -> UsageParams:
        if self.half_life_period_s is not None and self.half_life_period_s <= 0:
            return self.model_copy(update={"half_life_period_s": None})
        if self.window_type == "tumbling" and self.tumbling_window_start_time is None:
            raise ValueError("tumblingWindowStartTime is required when windowType is tumbling")
        return self


class JobAging(BaseModel):
    """Job aging against starvation (the ``aging`` plugin; KAI has none): a pending job's priority in its queue's
    job order rises by one per ``interval`` it has waited (event time, from its creation), by at most
    ``maxBoost``; a job that has waited ``holdAfter`` and finds no room holds back the jobs behind it in its queue
    that want the same kind of resource (GPU or not) until it fits."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    interval_s: float = Field(default=600.0, gt=0, alias="interval", description="waiting time per priority step")
    max_boost: int = Field(default=50, ge=0, alias="maxBoost", description="the most a job's priority rises")
    hold_after_s: float | None = Field(
        default=1800.0,
        alias="holdAfter",
        description="waiting time after which a job that finds no room holds back the jobs behind it; unset or 0: "
        "never",
    )

    @field_validator("interval_s", "hold_after_s", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        return parse_duration(value)

    @model_validator(mode="after")
    def _no_hold(self) -> JobAging:
        if self.hold_after_s is not None and self.hold_after_s <= 0:
            return self.model_copy(update={"hold_after_s": None})
        return self


class SchedulerConfig(BaseModel):
    """Everything that changes decisions besides the events. Hashed into every decision."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    scheduler_name: str = "kai-scheduler"
    actions: tuple[ActionName, ...] = DEFAULT_ACTIONS
    plugins: tuple[str, ...] = DEFAULT_PLUGINS
    placement: PlacementConfig = PlacementConfig()
    stale_gang_grace_s: float = Field(default=60.0, ge=0)
    usage_decay_k: float = Field(
        default=0.0,
        ge=0,
        alias="kValue",
        description="KAI's kValue: over-quota weights become max(0, w + k(w - u)), u the queue's usage share "
        "(1.0 when usage_params is set and this is not)",
    )
    usage_params: UsageParams | None = Field(
        default=None,
        alias="usageParams",
        description="time-based fair share: the usage window (KAI's usageDBConfig.usageParams); unset: off",
    )
    job_aging: JobAging | None = Field(
        default=None,
        alias="jobAging",
        description="job aging (the aging plugin, added to the default plugins when set); unset: off, as KAI",
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

    @model_validator(mode="before")
    @classmethod
    def _kai_k_default(cls, data: Any) -> Any:
        """KAI's kValue defaults to 1.0; here it does too once a usage window is configured."""
        enabled = isinstance(data, dict) and data.get("usage_params", data.get("usageParams")) is not None
        if enabled and "usage_decay_k" not in data and "kValue" not in data:
            return {**data, "usage_decay_k": 1.0}
        return data

    @model_validator(mode="before")
    @classmethod
    def _aging_plugin(cls, data: Any) -> Any:
        """A ``jobAging`` block turns the aging plugin on when ``plugins`` is left at its default; naming the plugin
        without the block takes the block's defaults."""
        if not isinstance(data, dict):
            return data
        block = data.get("job_aging", data.get("jobAging"))
        if block is not None and "plugins" not in data:
            return {**data, "plugins": (*DEFAULT_PLUGINS, "aging")}
        if block is None and "aging" in (data.get("plugins") or ()):
            return {**data, "job_aging": JobAging()}
        return data

    @model_validator(mode="after")
    def _aging_named(self) -> SchedulerConfig:
        if self.job_aging is not None and "aging" not in self.plugins:
            raise ValueError("jobAging is set but plugins does not name 'aging'")
        return self

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
    """SHA-256 of the canonical JSON of ``config`` (sorted keys). An unset ``usage_params`` or ``job_aging`` is left
    out, so configs without them keep the hashes they had before they existed."""
    data = config.model_dump(mode="json")
    for optional in ("usage_params", "job_aging"):
        if data.get(optional) is None:
            data.pop(optional, None)
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()
