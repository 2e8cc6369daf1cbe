"""The core never reads the clock or draws random ids. Which modules it may import at all is the allowlist import
contract in pyproject.toml (``lint-imports``; ``tests/architecture``)."""

from __future__ import annotations

from pathlib import Path

import kai_stream.core

CORE = Path(kai_stream.core.__file__).parent


def test_core_never_reads_the_clock() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert len(files) > 10
    for path in files:
        text = path.read_text()
        for call in ("datetime.now(", "datetime.utcnow(", "time.time(", "uuid.uuid4(", "uuid.uuid1("):
            assert call not in text, f"{path.name} calls {call}"
