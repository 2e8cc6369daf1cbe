"""Build hook: the pure scheduler core (``kai_stream/core/scheduler``, package ``__init__`` files excepted) is
compiled to C extensions with mypyc, the compiler of the pinned mypy; the sources stay the same code and the
reference for tests (``kai_stream.core.scheduler.prefer_sources``). The sources' SHA-256 go to
``kai_stream/core/scheduler/compiled_sources.json`` (as ``kai_stream.core.scheduler.source_digests`` computes
them): at import, a source edited after the build is run instead of its stale extension.
``KAI_STREAM_NO_COMPILE=1`` installs the sources alone (no C compiler needed). Everything else about the package
is in pyproject.toml."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from setuptools import setup

CORE = Path("kai_stream") / "core" / "scheduler"


def compiled_modules() -> list[str]:
    return sorted(str(path) for path in CORE.rglob("*.py") if path.name != "__init__.py")


def record_sources(core: Path = CORE) -> None:
    """What the extensions are built from; the package compares it with its sources at import."""
    digests = {
        path.relative_to(core).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(core.rglob("*.py"))
        if path.name != "__init__.py"
    }
    (core / "compiled_sources.json").write_text(json.dumps({"sources": digests}, indent=1, sort_keys=True) + "\n")


def main() -> None:
    if os.environ.get("KAI_STREAM_NO_COMPILE", "") in ("", "0"):
        from mypyc.build import mypycify

        record_sources()
        setup(ext_modules=mypycify(compiled_modules(), opt_level="3"))
    else:
        setup()


if __name__ == "__main__":  # setuptools runs this file as __main__
    main()
