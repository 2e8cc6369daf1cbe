"""The `kai-stream` command line: one typer app; each sub-command lives in its own module here."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="kai-stream: event-sourced GPU scheduler")


def _register() -> None:
    """Import command modules explicitly, in a fixed order (no import-time discovery)."""
    from kai_stream.cli import simulate  # noqa: F401
    from kai_stream.cli import binder, broker, topics  # noqa: F401
    from kai_stream.cli import cluster  # noqa: F401
    from kai_stream.cli import gpu_agent  # noqa: F401
    from kai_stream.cli import audit, explain, history, replay, tail  # noqa: F401
    from kai_stream.cli import connector, processor, run  # noqa: F401
    from kai_stream.cli import analyze, trace  # noqa: F401


def main() -> None:
    _register()
    app()
