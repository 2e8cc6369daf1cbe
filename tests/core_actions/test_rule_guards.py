"""Scenarios that each pin one rule of the eviction actions and topology placement (kai-semantics.md): each fails
when its rule is taken out of the code (the mutation named per scenario, checked by hand when it was added)."""

from __future__ import annotations

import pytest

from .harness import check, run

GUARDS = [
    # reclaim: a victim queue over its share on any resource gives, not only on the requested ones (mutation: the
    # eligibility filter reads the requested resources only).
    "reclaim-victim-over-share-on-any-resource.yaml",
    # reclaim: a victim queue stops giving once the victims it gave bring it to its fair share (mutation: the
    # GPU it gave not counted down).
    "reclaim-victim-queue-stops-at-fair-share.yaml",
    # reclaim: over deserved but within fair share gives victims only to a reclaimer within its deserved quota
    # (mutations: the deserved-quota branch removed; the reclaimer counted as within deserved always).
    "reclaim-over-deserved-by-reclaimer-within-deserved.yaml",
    "reclaim-over-deserved-not-by-reclaimer-over-deserved.yaml",
    # reclaim: a non-preemptible reclaimer is bounded by its deserved quota (mutation: bounded by fair share).
    "reclaim-non-preemptible-bounded-by-deserved.yaml",
    # reclaim: sibling saturation at every level of the ancestry (mutation: the leaf's level only).
    "reclaim-saturation-above-the-leaf.yaml",
    # consolidation: accepted only if every moved pod is re-placed (mutation: a moved pod with no place is skipped).
    "consolidation-every-move-re-placed.yaml",
    # preempt: strictly lower priority (mutation: <= instead of <) and within the queue (mutation: every leaf
    # queue's running jobs as victims).
    "preempt-strictly-lower-priority.yaml",
    "preempt-only-within-the-queue.yaml",
    # topology: the preferred level before the required one (mutation: the required level only), and the
    # tightest domain first (mutation: domains ranked without their free GPU).
    "topology-preferred-host-over-tighter-rack.yaml",
    "topology-tightest-rack.yaml",
    # victim search: a job is solved only with its whole gang (mutation: place_job's gang checks removed).
    "reclaim-gang-freed-gpu-spread.yaml",
]


@pytest.mark.parametrize("name", GUARDS)
def test_rule_guard(name: str) -> None:
    result, expect = run(name)
    check(result, expect)
