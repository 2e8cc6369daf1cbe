"""The `kai-stream` command line: one typer app; each sub-command lives in its own module here."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="kai-stream: event-sourced GPU scheduler")


def _register() -> None:
    """Import command modules explicitly, in a fixed order (no import-time discovery)."""
    from kai_stream.cli import (  # noqa: F401
        analyze,
        audit,
        binder,
        broker,
        cluster,
        connector,
        dryrun,
        explain,
        gpu_agent,
        history,
        processor,
        replay,
        run,
        simulate,
        tail,
        topics,
        trace,
    )


def main() -> None:
    _register()
    app()
