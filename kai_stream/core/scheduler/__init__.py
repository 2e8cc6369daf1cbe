"""The pure scheduler: framework (session, hooks, statement), actions, plugins, fair share, and the cycle.

Its modules (these package ``__init__`` files excepted) are installed compiled by mypyc (``setup.py``) and load as
C extensions; the sources are the same code. ``prefer_sources`` makes the modules of this package that are not
imported yet load from their ``.py`` files instead: for white-box tests that patch or spy on internals, which a
compiled module calls directly. ``compiled`` says which kind is loaded.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, ModuleSpec, PathFinder
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType

__all__ = ["MANIFEST", "compiled", "prefer_sources", "source_digests", "stale_sources"]

MANIFEST = "compiled_sources.json"


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


def source_digests(package: Path) -> dict[str, str]:
    """SHA-256 of every module source under ``package`` (``__init__`` files excepted), by relative path."""
    return {
        path.relative_to(package).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(package.rglob("*.py"))
        if path.name != "__init__.py"
    }


def stale_sources(package: Path) -> list[str]:
    """Sources under ``package`` that differ from what its compiled modules were built from (relative paths)."""
    built = sorted(p for p in package.rglob("*") if p.name.endswith(tuple(EXTENSION_SUFFIXES)))
    if not built:
        return []
    try:
        recorded: dict[str, str] | None = json.loads((package / MANIFEST).read_text())["sources"]
    except (OSError, ValueError, KeyError, TypeError):
        recorded = None
    stale: list[str] = []
    for extension in built:
        source = extension.with_name(extension.name.split(".")[0] + ".py")
        if not source.is_file():
            continue
        relative = source.relative_to(package).as_posix()
        if recorded is None:
            changed = source.stat().st_mtime > extension.stat().st_mtime
        else:
            changed = recorded.get(relative) != hashlib.sha256(source.read_bytes()).hexdigest()
        if changed:
            stale.append(relative)
    return stale


def _never_shadow_sources() -> None:
    stale = stale_sources(Path(__file__).parent)
    if stale:
        shown = ", ".join(stale[:3]) + (f" and {len(stale) - 3} more" if len(stale) > 3 else "")
        sys.stderr.write(
            f"kai-stream: the compiled scheduler core is older than its sources ({shown} edited): running the "
            "sources (slower); `make` rebuilds it\n"
        )
        prefer_sources()


_never_shadow_sources()
