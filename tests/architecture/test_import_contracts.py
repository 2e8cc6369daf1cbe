"""The import contracts in pyproject.toml hold, cover every package, and the allowlist contract can fail."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

from tests.architecture.allowlist import AllowlistContract

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def test_the_contracts_hold() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_every_module_is_in_one_allowlist() -> None:
    allowlists = [contract for contract in CONFIG["contracts"] if contract["type"] == "allowlist"]
    sources = [name for contract in allowlists for name in contract["source_modules"]]
    assert len(sources) == len(set(sources))
    tops = {
        f"kai_stream.{path.stem}"
        for path in (ROOT / "kai_stream").iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    }
    assert tops == set(sources)


def _check(imports: list[tuple[str, str]], allowed: list[str], ignore: list[str] | None = None) -> list[str]:
    graph = grimp.ImportGraph()
    graph.add_module("pkg")
    graph.add_module("pkg.core")
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported)
    options: dict[str, object] = {"source_modules": ["pkg.core"], "allowed_modules": allowed}
    if ignore is not None:
        options["ignore_imports"] = ignore
    check = AllowlistContract("c", {}, options).check(graph, verbose=False)
    assert check.kept is not bool(check.metadata["broken"])
    broken: list[str] = check.metadata["broken"]
    return broken


def test_an_import_off_the_allowlist_breaks_it() -> None:
    imports = [("pkg.core.a", "pkg.core.b"), ("pkg.core.a", "json"), ("pkg.core.b", "aiokafka"), ("pkg.io", "pkg.core")]
    assert _check(imports, ["json", "aiokafka"]) == []
    assert _check(imports, ["json"]) == ["pkg.core.b imports aiokafka, which is not on the allowlist"]
    assert _check(imports, ["@stdlib"]) == ["pkg.core.b imports aiokafka, which is not on the allowlist"]
    assert _check(imports, ["@stdlib"], ["pkg.core.b -> aiokafka"]) == []


def test_exact_entries_allow_the_module_alone() -> None:
    imports = [("pkg.core.a", "pkg"), ("pkg.core.a", "pkg.cli")]
    assert _check(imports, ["=pkg"]) == ["pkg.core.a imports pkg.cli, which is not on the allowlist"]


def test_a_stale_exception_breaks_it() -> None:
    assert _check([("pkg.core.a", "json")], ["json"], ["pkg.core.a -> yaml"]) == [
        "ignore_imports matches no import: pkg.core.a -> yaml"
    ]
