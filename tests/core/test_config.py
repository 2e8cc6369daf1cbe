"""Scheduler config: defaults, fail-fast loading naming the field, stable hash."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from kai_stream.core.config import OPTIONAL_PLUGINS, SchedulerConfig, config_hash, load_config
from kai_stream.core.events import ActionName
from kai_stream.core.scheduler.actions import ACTIONS
from kai_stream.core.scheduler.plugins import PLUGINS


def test_defaults_follow_kai() -> None:
    config = SchedulerConfig()
    assert config.actions == ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
    assert (config.placement.gpu, config.placement.cpu, config.stale_gang_grace_s) == ("binpack", "binpack", 60.0)
    assert config.scheduler_name == "kai-scheduler"
    assert (config.preempt_min_runtime_s, config.reclaim_min_runtime_s) == (0.0, 0.0)


def test_load_and_hash(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("placement: {gpu: spread}\nactions: [allocate]\n")
    config = load_config(path)
    assert config.placement.gpu == "spread" and config.actions == ("allocate",)
    assert config_hash(config) == config_hash(load_config(path))
    assert config_hash(config) != config_hash(SchedulerConfig())
    assert len(config_hash(config)) == 64


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("placement: {gpu: diagonal}", "placement.gpu"),
        ("actions: [allocate, dance]", "actions"),
        ("stale_gang_grace_s: -1", "stale_gang_grace_s"),
        ("reclaim_min_runtime_s: -2", "reclaim_min_runtime_s"),
        ("preempt_min_runtime_s: soon", "preempt_min_runtime_s"),
        ("bogus: 1", "bogus"),
        ("plugins: [nope]", "plugins"),
        ("plugins: [gang, gang]", "plugins"),
        ("actions: [allocate, allocate]", "actions"),
        ("- a list", "mapping"),
    ],
)
def test_bad_config_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=field):
        load_config(path)


def test_config_is_frozen() -> None:
    with pytest.raises(ValueError):
        SchedulerConfig().scheduler_name = "x"  # type: ignore[misc]


def test_config_admits_exactly_the_registered_names() -> None:
    """The event schema's action names are the registry's; the defaults are every action and every plugin of KAI's
    (job aging is not one)."""
    assert tuple(ACTIONS) == get_args(ActionName) == SchedulerConfig().actions
    assert SchedulerConfig().plugins == tuple(name for name in PLUGINS if name not in OPTIONAL_PLUGINS)
    assert OPTIONAL_PLUGINS == ("aging",)
    for name in PLUGINS:
        assert SchedulerConfig(plugins=(name,)).plugins == (name,)
        assert PLUGINS[name]().name == name
