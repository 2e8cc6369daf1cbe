"""Tamper evidence: check the hash chain that links each pool's decisions, offline.

Every decision carries ``prev_hash``: the SHA-256 of its predecessor's canonical bytes in the same pool
(the first decision of a pool links to ""). Altering, dropping or inserting a decision breaks the link to
its successor; ``verify_chain`` reports the first such link. The newest decision of a pool has no successor,
so only an external copy of the head hash (``ChainReport.heads``) can vouch for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kai_stream.core.events import Decision, decision_hash

__all__ = ["BrokenLink", "ChainReport", "verify_chain"]


@dataclass(frozen=True)
class BrokenLink:
    """The first decision whose ``prev_hash`` does not match the hash of the decision before it.

    ``index`` and ``offset`` locate the successor (the decision holding the bad link); ``suspect`` is its
    recorded predecessor, the decision that was most likely altered (None when the first decision of a pool
    does not start the chain at "").
    """

    pool: str
    index: int
    offset: int | None
    decision: Decision
    expected_prev_hash: str
    found_prev_hash: str
    suspect: Decision | None
    suspect_index: int | None
    suspect_offset: int | None

    def describe(self) -> str:
        where = f"offset {self.offset}" if self.offset is not None else f"#{self.index}"
        if self.suspect is None:
            return (
                f"pool {self.pool}: decision {where} ({self.decision.decision_id}) starts the chain with "
                f"prev_hash {self.found_prev_hash[:16]!r}, expected {self.expected_prev_hash[:16]!r}"
            )
        swhere = f"offset {self.suspect_offset}" if self.suspect_offset is not None else f"#{self.suspect_index}"
        return (
            f"pool {self.pool}: decision {swhere} ({self.suspect.type} {self.suspect.namespace}/{self.suspect.name}, "
            f"{self.suspect.decision_id}) hashes to {self.expected_prev_hash[:16]}… but its successor at {where} "
            f"records {self.found_prev_hash[:16]}…: one of the two was altered, dropped or inserted"
        )


@dataclass
class ChainReport:
    """What a verification saw: decisions checked per pool, each pool's head hash, the first break."""

    checked: int = 0
    pools: dict[str, int] = field(default_factory=dict)
    heads: dict[str, str] = field(default_factory=dict)
    broken: BrokenLink | None = None

    @property
    def ok(self) -> bool:
        return self.broken is None


def verify_chain(
    decisions: Iterable[Decision],
    *,
    offsets: Sequence[int] | None = None,
    start_hashes: dict[str, str] | None = None,
) -> ChainReport:
    """Walk decisions in recorded order (pools may interleave) and stop at the first broken link.

    ``offsets`` (parallel to ``decisions``) are their offsets in the decisions topic, for the report;
    ``start_hashes`` gives a pool's expected first ``prev_hash`` when the log does not start at its beginning.
    """
    report = ChainReport()
    starts = start_hashes or {}
    last: dict[str, tuple[int, Decision, str]] = {}
    for index, decision in enumerate(decisions):
        pool = decision.pool
        previous = last.get(pool)
        expected = previous[2] if previous is not None else starts.get(pool, "")
        if decision.prev_hash != expected:
            report.broken = BrokenLink(
                pool=pool,
                index=index,
                offset=offsets[index] if offsets is not None else None,
                decision=decision,
                expected_prev_hash=expected,
                found_prev_hash=decision.prev_hash,
                suspect=previous[1] if previous is not None else None,
                suspect_index=previous[0] if previous is not None else None,
                suspect_offset=offsets[previous[0]] if previous is not None and offsets is not None else None,
            )
            return report
        head = decision_hash(decision)
        last[pool] = (index, decision, head)
        report.checked += 1
        report.pools[pool] = report.pools.get(pool, 0) + 1
        report.heads[pool] = head
    return report
