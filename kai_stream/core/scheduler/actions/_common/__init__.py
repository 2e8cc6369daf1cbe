"""Logic shared by the victim-searching actions (reclaim, preempt, consolidation)."""
