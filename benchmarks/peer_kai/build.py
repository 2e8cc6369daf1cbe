"""Build KAI Scheduler's commands from the module pinned in ``go/go.mod`` into ``~/.cache/kai-stream/bin``:
``python benchmarks/peer_kai/build.py`` (the first build takes many minutes; later ones reuse the cache). Prints
each binary's path; ``run.py`` and ``agree.py`` build on first use as well."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import typer
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.peer_kai import kai
from kai_stream.connectors.apiserver import BuildError

app = typer.Typer(add_completion=False)


@app.command()
def main() -> None:
    """Build (or find cached) every KAI component the harness runs, and show where KAI's CRDs come from."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    console = Console()
    began = time.monotonic()
    try:
        binaries = kai.ensure_binaries()
        source = kai.module_dir()
    except BuildError as err:
        console.print(f"[red]KAI build failed:[/] {err}")
        raise typer.Exit(1) from err
    for name, path in binaries.items():
        console.print(f"{name:<20} {path}")
    console.print(f"KAI Scheduler {kai.version()} from {source} ({len(kai.crds())} CRDs); "
                  f"{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    app()
