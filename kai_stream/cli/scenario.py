"""Reading and validating a scenario file for commands that start something from it (run, cluster): every
problem becomes a ``UserError`` naming the file, before anything starts."""

from __future__ import annotations

from pathlib import Path

from kai_stream.cli.errors import UserError
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ObservedEvent
from kai_stream.core.manifests import ManifestError, load_scenario, validate_manifests


def read_scenario(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise UserError(f"{path}: cannot read scenario: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (UTF-8 YAML expected)") from None


def load_scenario_file(path: Path, settings: SchedulerConfig, *, lenient: bool = False) -> list[ObservedEvent]:
    """The scenario's events under ``settings``; the whole file validated as ``simulate`` does."""
    text = read_scenario(path)
    try:
        return load_scenario(
            text, scheduler_name=settings.scheduler_name, default_queue=settings.default_queue, lenient=lenient
        )
    except ManifestError as exc:
        raise UserError(f"{path}: {exc}") from None


def validate_scenario_file(path: Path, *, lenient: bool = False) -> None:
    """Each manifest against its kind's schema (a simulated cluster also serves kinds the scheduler ignores)."""
    text = read_scenario(path)
    try:
        validate_manifests(text, lenient=lenient)
    except ManifestError as exc:
        raise UserError(f"{path}: {exc}") from None
