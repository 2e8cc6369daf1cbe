"""The `kai-stream` command line: one typer app; each sub-command lives in its own module here.

``main`` is the error boundary (``kai_stream.cli.errors``): a failing command prints one line and exits
non-zero; ``--debug`` shows the traceback. It imports only the module of the command it runs (``COMMANDS``; all of
them for help or completion): the command modules together take seconds to import, which a restarted binder or
connector would otherwise spend before its first record."""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

import typer
from typer.core import TyperOption

from kai_stream.cli.errors import exit_on, quiet_duplicates, set_debug

app = typer.Typer(
    no_args_is_help=True,
    help="kai-stream: event-sourced GPU scheduler",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)


def _version() -> str:
    try:
        return version("kai-stream")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kai-stream {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="show the full traceback when a command fails")] = False,
    show_version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """kai-stream: event-sourced GPU scheduler (KAI Scheduler compatible)."""
    set_debug(debug)


def _flags_without_type() -> None:
    """typer prints ``<bool>`` as the type of an on/off flag, which takes no value: show no type for flags."""
    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None:
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


COMMANDS = {
    "analyze": "analyze",
    "audit": "audit",
    "binder": "binder",
    "broker": "broker",
    "cluster": "cluster",
    "connector": "connector",
    "dry-run": "dryrun",
    "explain": "explain",
    "gpu-agent": "gpu_agent",
    "history-sink": "history",
    "processor": "processor",
    "replay": "replay",
    "run": "run",
    "simulate": "simulate",
    "tail": "tail",
    "topics": "topics",
    "trace": "trace",
}
"""Top-level command name -> the module under ``kai_stream.cli`` that registers it."""


def _command(argv: list[str]) -> str | None:
    """The command ``argv`` runs: its first word that is not an option of the root callback."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


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
    module = COMMANDS.get(_command(sys.argv[1:]) or "")
    if module is None:
        _register()
    else:
        importlib.import_module(f"kai_stream.cli.{module}")
    _flags_without_type()
    quiet_duplicates()
    try:
        app(prog_name="kai-stream")
    except Exception as exc:
        exit_on(exc)
