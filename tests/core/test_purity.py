"""The core is sans-I/O: nothing under kai_stream/core imports async, Kafka, Kubernetes clients, clock or randomness."""

from __future__ import annotations

import ast
from pathlib import Path

import kai_stream.core

FORBIDDEN = {"asyncio", "aiokafka", "faust", "kubernetes_asyncio", "time", "random", "datetime.now"}
CORE = Path(kai_stream.core.__file__).parent


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_imports_nothing_impure() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert len(files) > 10
    offenders = {str(f.relative_to(CORE)): sorted(_imports(f) & FORBIDDEN) for f in files}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_core_never_reads_the_clock() -> None:
    for path in sorted(CORE.rglob("*.py")):
        text = path.read_text()
        for call in ("datetime.now(", "datetime.utcnow(", "time.time(", "uuid.uuid4(", "uuid.uuid1("):
            assert call not in text, f"{path.name} calls {call}"


def test_guard_detects_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import asyncio\nfrom random import choice\n")
    assert _imports(sample) & FORBIDDEN == {"asyncio", "random"}
