"""Build hook: the pure scheduler core (``kai_stream/core/scheduler``, package ``__init__`` files excepted) is
compiled to C extensions with mypyc, the compiler of the pinned mypy; the sources stay the same code and the
reference for tests (``kai_stream.core.scheduler.prefer_sources``). ``KAI_STREAM_NO_COMPILE=1`` installs the
sources alone (no C compiler needed). Everything else about the package is in pyproject.toml."""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

CORE = Path("kai_stream") / "core" / "scheduler"


def compiled_modules() -> list[str]:
    return sorted(str(path) for path in CORE.rglob("*.py") if path.name != "__init__.py")


if os.environ.get("KAI_STREAM_NO_COMPILE", "") in ("", "0"):
    from mypyc.build import mypycify

    setup(ext_modules=mypycify(compiled_modules(), opt_level="3"))
else:
    setup()
