"""The pure scheduler: framework (session, hooks, statement), actions, plugins, fair share, and the cycle.

Its modules (these package ``__init__`` files excepted) are installed compiled by mypyc (``setup.py``) and load as
C extensions; the sources are the same code. ``prefer_sources`` makes the modules of this package that are not
imported yet load from their ``.py`` files instead: for white-box tests that patch or spy on internals, which a
compiled module calls directly. ``compiled`` says which kind is loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ExtensionFileLoader, ModuleSpec, PathFinder
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType

__all__ = ["compiled", "prefer_sources"]


class _SourcesFirst(MetaPathFinder):
    """Finds this package's modules as the path finder does, but from the ``.py`` file next to an extension."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not fullname.startswith(__name__ + "."):
            return None
        spec = PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, ExtensionFileLoader) or spec.origin is None:
            return spec
        source = Path(spec.origin).parent / (fullname.rpartition(".")[2] + ".py")
        return spec_from_file_location(fullname, source) if source.is_file() else spec


def prefer_sources() -> None:
    """Load this package's modules imported from now on from their sources (idempotent)."""
    if not any(isinstance(finder, _SourcesFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourcesFirst())


def compiled() -> bool:
    """Whether the scheduler's session module (every module of the package, as installed) is a C extension."""
    from kai_stream.core.scheduler.framework import session

    spec = session.__spec__
    return spec is not None and isinstance(spec.loader, ExtensionFileLoader)
