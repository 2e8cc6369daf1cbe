"""The cluster's answers to the scheduler's decisions, built once for the binder and every emulation.

One id scheme: an outcome of decision ``d`` of kind ``K`` (``PodBound``, ``BindFailed``, ``PodEvicted``,
``EvictionFailed``) has ``event_id = stable_id("outcome", d.decision_id, K)`` and the decision's ``ts``, so the
outcome of a decision is the same bytes however often (and wherever) it is applied: the live binder, an
in-process simulation, a what-if and a trace run write the same ids.
"""

from __future__ import annotations

from typing import Any

from kai_stream.core.events import (
    BindFailed,
    BindRequested,
    Decision,
    EvictionFailed,
    EvictionRequested,
    PodBound,
    PodEvicted,
    stable_id,
)

__all__ = ["bind_failed", "eviction_failed", "outcome_id", "outcome_of", "pod_bound", "pod_evicted"]


def outcome_id(decision_id: str, kind: str) -> str:
    """The event id of the ``kind`` outcome of decision ``decision_id``."""
    return stable_id("outcome", decision_id, kind)


def _fields(decision: BindRequested | EvictionRequested, kind: str) -> dict[str, Any]:
    """The fields every outcome of ``decision`` has."""
    return {
        "event_id": outcome_id(decision.decision_id, kind),
        "ts": decision.ts,
        "pool": decision.pool,
        "decision_id": decision.decision_id,
        "namespace": decision.namespace,
        "name": decision.name,
        "uid": decision.uid,
    }


def pod_bound(decision: BindRequested, *, already: bool = False) -> PodBound:
    """The pod is bound where ``decision`` said (``already``: it was before this apply)."""
    return PodBound(**_fields(decision, "PodBound"), node=decision.node, gpu_indices=decision.gpu_indices,
                    already=already)


def bind_failed(decision: BindRequested, error: str, *, pod_gone: bool = False) -> BindFailed:
    """The bind did not happen (``pod_gone``: the pod no longer exists)."""
    return BindFailed(**_fields(decision, "BindFailed"), node=decision.node, error=error, pod_gone=pod_gone)


def pod_evicted(decision: EvictionRequested, *, already: bool = False) -> PodEvicted:
    """The eviction was accepted (``already``: the pod was gone before it)."""
    return PodEvicted(**_fields(decision, "PodEvicted"), already=already)


def eviction_failed(decision: EvictionRequested, error: str) -> EvictionFailed:
    return EvictionFailed(**_fields(decision, "EvictionFailed"), error=error)


def outcome_of(decision: Decision) -> PodBound | PodEvicted | None:
    """The successful answer to ``decision`` (None when the decision needs no answer)."""
    if isinstance(decision, BindRequested):
        return pod_bound(decision)
    if isinstance(decision, EvictionRequested):
        return pod_evicted(decision)
    return None
