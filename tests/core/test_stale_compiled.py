"""A compiled scheduler module never shadows its edited source: when the sources differ from what the build
recorded, the package loads from the sources and says so in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from kai_stream.core.scheduler import MANIFEST, source_digests, stale_sources

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = EXTENSION_SUFFIXES[0]


def _package(tmp_path: Path) -> Path:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("X = 1\n")
    (package / "sub" / "b.py").write_text("Y = 2\n")
    return package


def test_nothing_compiled_is_never_stale(tmp_path: Path) -> None:
    assert stale_sources(_package(tmp_path)) == []


def test_recorded_digests_decide(tmp_path: Path) -> None:
    package = _package(tmp_path)
    (package / f"a{SUFFIX}").write_bytes(b"")
    (package / "sub" / f"b{SUFFIX}").write_bytes(b"")
    (package / MANIFEST).write_text(json.dumps({"sources": source_digests(package)}))
    assert stale_sources(package) == []
    (package / "sub" / "b.py").write_text("Y = 3\n")
    assert stale_sources(package) == ["sub/b.py"]


def test_without_a_record_newer_sources_are_stale(tmp_path: Path) -> None:
    package = _package(tmp_path)
    extension = package / f"a{SUFFIX}"
    extension.write_bytes(b"")
    old = time.time() - 60
    os.utime(extension, (old, old))
    assert stale_sources(package) == ["a.py"]
    os.utime(package / "a.py", (old - 60, old - 60))
    assert stale_sources(package) == []


def test_an_edited_source_runs_instead_of_its_stale_extension(tmp_path: Path) -> None:
    """A copy of the package with a (deliberately unloadable) extension next to cycle.py and a record of other
    sources: importing it warns once and loads cycle.py; without the check the import would fail."""
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / "kai_stream", copy / "kai_stream", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    scheduler = copy / "kai_stream" / "core" / "scheduler"
    (scheduler / f"cycle{SUFFIX}").write_bytes(b"not an extension")
    recorded = source_digests(scheduler) | {"cycle.py": "0" * 64}
    (scheduler / MANIFEST).write_text(json.dumps({"sources": recorded}))
    code = "import kai_stream.core.scheduler.cycle as c; print(c.__file__)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(copy)},
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(scheduler / "cycle.py")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cycle.py edited" in lines[0] and "running the sources" in lines[0]


def test_the_build_records_what_the_check_compares(tmp_path: Path) -> None:
    """setup.py writes the digests stale_sources reads (same paths, same hashes)."""
    import runpy

    build = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_under_test")
    package = _package(tmp_path)
    build["record_sources"](package)
    assert json.loads((package / MANIFEST).read_text()) == {"sources": source_digests(package)}
    (package / f"a{SUFFIX}").write_bytes(b"")
    assert stale_sources(package) == []
