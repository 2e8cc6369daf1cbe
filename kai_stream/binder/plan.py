"""The binder's pure half: which Kubernetes actions a batch of decisions-topic records calls for.

Rules:

1. Only ``BindRequested`` (bind), ``EvictionRequested`` (evict) and ``PodPending`` (mark the pod
   unschedulable for autoscalers) need the API; ``PodPipelined``, ``ConfigRecorded`` and
   ``FairShareRecorded`` need nothing.
2. A decision already applied (its id in ``done``) or repeated within the batch is skipped: re-delivery is
   normal under at-least-once.
3. A ``PodPending`` is dropped when a later record of the batch binds, evicts or re-marks the same pod:
   only the newest word about a pod reaches the API.
4. Otherwise log order is kept; ``lanes`` splits actions per pod so pods run concurrently while each pod's
   actions stay in order.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass

from kai_stream.core.events import BindRequested, DecisionsRecord, EvictionRequested, PodPending


@dataclass(frozen=True)
class Bind:
    decision: BindRequested


@dataclass(frozen=True)
class Evict:
    decision: EvictionRequested


@dataclass(frozen=True)
class MarkUnschedulable:
    decision: PodPending


Action = Bind | Evict | MarkUnschedulable


def pod_key(action: Action) -> str:
    decision = action.decision
    return f"{decision.namespace}/{decision.name}"


def plan(batch: Sequence[DecisionsRecord], done: Container[str] = frozenset()) -> list[Action]:
    """The API actions for ``batch`` (in log order), skipping applied, repeated and superseded decisions."""
    candidates: list[Action] = []
    seen: set[str] = set()
    for record in batch:
        action: Action
        if isinstance(record, BindRequested):
            action = Bind(record)
        elif isinstance(record, EvictionRequested):
            action = Evict(record)
        elif isinstance(record, PodPending):
            action = MarkUnschedulable(record)
        else:
            continue
        decision_id = action.decision.decision_id
        if decision_id in done or decision_id in seen:
            continue
        seen.add(decision_id)
        candidates.append(action)
    last_index = {pod_key(action): index for index, action in enumerate(candidates)}
    return [
        action
        for index, action in enumerate(candidates)
        if not isinstance(action, MarkUnschedulable) or last_index[pod_key(action)] == index
    ]


def lanes(actions: Sequence[Action]) -> list[list[Action]]:
    """Actions grouped per pod (pods in order of first appearance, each pod's actions in log order)."""
    by_pod: dict[str, list[Action]] = {}
    for action in actions:
        by_pod.setdefault(pod_key(action), []).append(action)
    return list(by_pod.values())
