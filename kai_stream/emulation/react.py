"""What the cluster does after a decision: ``react(decision, state, policy, marks) -> events``.

The binder's outcome (``outcomes.py``) comes first; then what the connector observes, as far as ``Policy``
asks for it:

* ``BindRequested`` -> ``PodBound``; with ``steps`` the pod observed on its node (the binding), with ``running``
  the pod observed ``Running`` there (``started`` kept if it had one, else the decision's time); with
  ``steps`` a bind clears the binder's marks on the pod and its PodGroup (the group observed again).
* ``EvictionRequested`` -> with ``steps`` the pod observed with the binder's ``DisruptionTarget`` condition
  first, then ``PodEvicted``; then by ``recreate``: ``"restart"`` observes the pod pending again under its
  own uid (restarted from scratch); otherwise, with a ``termination_grace`` and the pod on a node, the pod is
  observed terminating (``removal`` later removes it), else ``removal`` at once: ``PodRemoved``, then for
  ``"label"`` its replacement pending when ``recreated_after_eviction``.
* ``PodPending`` (``steps`` only) -> the pod observed again when the binder's ``PodScheduled=False`` message
  for it changes, and its PodGroup when the group's ``UnschedulableOnNodePool`` message changes (``Marks``).
* ``PodPipelined`` -> nothing.

With ``durations`` a bound pod's ``duration_s`` is played out: the clock asks ``finishes_at`` and folds
``finished`` then (Succeeded, then deleted). Observations made for decision ``d`` have ids
``stable_id(why, d.decision_id)``; ``finished`` is keyed by the decision that bound the pod. Re-created pods:
same name, uid ``recreated_uid(old uid)``. The state given is the one the decision was made on: the decisions of
its cycle may be folded already (they change no pod), their reactions not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kai_stream.core.events import (
    BindRequested,
    ClusterEvent,
    Decision,
    EvictionRequested,
    PodGroupObserved,
    PodObserved,
    PodPending,
    PodRemoved,
    PodSpec,
    stable_id,
)
from kai_stream.core.state import ClusterState
from kai_stream.emulation.outcomes import pod_bound, pod_evicted

__all__ = [
    "LABEL_RECREATE",
    "Marks",
    "Policy",
    "finished",
    "finishes_at",
    "pending_message",
    "pod_removed",
    "react",
    "recreated_after_eviction",
    "recreated_uid",
    "removal",
]

LABEL_RECREATE = "kai.scheduler/recreate-on-evict"

_PENDING_AGAIN = {"node_name": None, "gpu_indices": None, "phase": "Pending", "started": None, "terminating": False}


@dataclass(frozen=True)
class Policy:
    """How the emulated cluster answers (module doc)."""

    recreate: Literal["label", "never", "restart"] = "label"
    termination_grace: float = 0.0
    steps: bool = True
    """Observe the binder's intermediate writes: binding, DisruptionTarget condition, pending marks."""
    running: bool = True
    """Observe a bound pod Running."""
    durations: bool = False
    """A bound pod with ``duration_s`` finishes that long after its bind (``finishes_at``, then ``finished``)."""


@dataclass
class Marks:
    """The ``PodScheduled=False`` messages the binder has put on pods (by uid) and the
    ``UnschedulableOnNodePool`` messages on PodGroups (by (group key, pool)): a mark that changes nothing is
    not written, so it is not observed either."""

    pods: dict[str, str] = field(default_factory=dict)
    groups: dict[tuple[str, str], str] = field(default_factory=dict)


def pending_message(decision: PodPending) -> str:
    """The human message for a pending pod: the scheduler's reason, else its code and failed predicates."""
    if decision.reason:
        return decision.reason
    if decision.predicates:
        counts = ", ".join(f"{name}: {n} nodes" for name, n in sorted(decision.predicates.items()))
        return f"{decision.code} ({counts})"
    return decision.code


def recreated_after_eviction(decision: EvictionRequested, labels: dict[str, str]) -> bool:
    """Whether the evicted pod comes back pending: a consolidation move (its controller restarts it elsewhere),
    or a pod labelled ``kai.scheduler/recreate-on-evict: "true"``; never one labelled ``"false"``."""
    flag = labels.get(LABEL_RECREATE, "").strip().lower()
    if flag in ("true", "false"):
        return flag == "true"
    return bool(decision.details.get("move_to"))


def recreated_uid(uid: str) -> str:
    """The uid of the pod a controller creates in place of the evicted pod ``uid``."""
    return stable_id("recreated", uid)


def _observed(pod: PodSpec, why: str, decision: Decision) -> PodObserved:
    return PodObserved(event_id=stable_id(why, decision.decision_id), ts=decision.ts, pool=pod.pool, pod=pod)


def _group_observed(state: ClusterState, pod: PodSpec, decision: Decision) -> list[ClusterEvent]:
    group = state.pod_groups.get(f"{pod.namespace}/{pod.pod_group}") if pod.pod_group else None
    if group is None:
        return []
    why = stable_id("PodGroupMarked", decision.decision_id)
    return [PodGroupObserved(event_id=why, ts=decision.ts, pool=group.pool, pod_group=group)]


def _marked(decision: PodPending, state: ClusterState, marks: Marks) -> list[ClusterEvent]:
    pod = state.pods.get(decision.uid)
    if pod is None or pod.node_name is not None:
        return []
    message = pending_message(decision)
    events: list[ClusterEvent] = []
    if marks.pods.get(pod.uid) != message:
        marks.pods[pod.uid] = message
        events.append(_observed(pod, "PodMarked", decision))
    group_key = (f"{pod.namespace}/{pod.pod_group}", decision.pool)
    if pod.pod_group and marks.groups.get(group_key) != message:
        marks.groups[group_key] = message
        events.extend(_group_observed(state, pod, decision))
    return events


def _bound(decision: BindRequested, state: ClusterState, policy: Policy, marks: Marks) -> list[ClusterEvent]:
    events: list[ClusterEvent] = [pod_bound(decision)]
    pod = state.pods.get(decision.uid)
    if pod is None or pod.node_name is not None:
        return events
    placed = {"node_name": decision.node, "gpu_indices": decision.gpu_indices or None}
    if policy.steps:
        events.append(_observed(pod.model_copy(update=placed), "PodBinding", decision))
    if policy.running:
        running = {**placed, "phase": "Running", "started": pod.started if pod.started is not None else decision.ts}
        events.append(_observed(pod.model_copy(update=running), "PodRunning", decision))
    if policy.steps:
        marks.pods.pop(pod.uid, None)
        group_key = (f"{pod.namespace}/{pod.pod_group}", decision.pool)
        if pod.pod_group and marks.groups.pop(group_key, None) is not None:
            events.extend(_group_observed(state, pod, decision))
    return events


def _evicted(decision: EvictionRequested, state: ClusterState, policy: Policy, marks: Marks) -> list[ClusterEvent]:
    events: list[ClusterEvent] = [pod_evicted(decision)]
    pod = state.pods.get(decision.uid)
    if pod is None:
        return events
    if policy.steps:
        events.insert(0, _observed(pod, "PodDisrupted", decision))
    marks.pods.pop(pod.uid, None)
    if policy.recreate == "restart":
        events.append(_observed(pod.model_copy(update=_PENDING_AGAIN), "PodRestarted", decision))
    elif policy.termination_grace > 0 and pod.node_name is not None:
        events.append(_observed(pod.model_copy(update={"terminating": True}), "PodTerminating", decision))
    else:
        events.extend(removal(decision, pod, decision.ts, policy))
    return events


def react(
    decision: Decision, state: ClusterState, policy: Policy = Policy(), marks: Marks | None = None
) -> list[ClusterEvent]:
    """What the binder and the connector put into cluster-events after ``decision`` (module doc); ``marks``:
    what the binder has marked so far (updated here)."""
    marks = marks if marks is not None else Marks()
    if isinstance(decision, BindRequested):
        return _bound(decision, state, policy, marks)
    if isinstance(decision, EvictionRequested):
        return _evicted(decision, state, policy, marks)
    if isinstance(decision, PodPending) and policy.steps:
        return _marked(decision, state, marks)
    return []


def pod_removed(pod: PodSpec, event_id: str, ts: float) -> PodRemoved:
    """``pod`` deleted from the cluster at ``ts``."""
    return PodRemoved(event_id=event_id, ts=ts, pool=pod.pool, namespace=pod.namespace, name=pod.name, uid=pod.uid)


def removal(decision: Decision, pod: PodSpec, ts: float, policy: Policy = Policy()) -> list[ClusterEvent]:
    """The evicted ``pod`` gone at ``ts``: its removal, then its replacement if a controller re-creates it."""
    events: list[ClusterEvent] = [pod_removed(pod, stable_id("PodRemoved", decision.decision_id), ts)]
    if (
        policy.recreate == "label"
        and isinstance(decision, EvictionRequested)
        and recreated_after_eviction(decision, pod.labels)
    ):
        recreated = pod.model_copy(update={**_PENDING_AGAIN, "uid": recreated_uid(pod.uid)})
        events.append(
            PodObserved(event_id=stable_id("PodRecreated", decision.decision_id), ts=ts, pool=pod.pool, pod=recreated)
        )
    return events


def finishes_at(decision: BindRequested, pod: PodSpec | None, policy: Policy) -> float | None:
    """When the pod ``decision`` binds finishes under ``policy`` (None: it runs until something removes it)."""
    if not policy.durations or pod is None or pod.duration_s is None:
        return None
    return decision.ts + pod.duration_s


def finished(pod: PodSpec, decision_id: str, ts: float, *, remove: bool = True) -> list[ClusterEvent]:
    """``pod`` (bound by decision ``decision_id``) observed Succeeded at ``ts``, then deleted (``remove``: as a
    Job's TTL controller does)."""
    succeeded = pod.model_copy(update={"phase": "Succeeded"})
    done = PodObserved(event_id=stable_id("PodSucceeded", decision_id), ts=ts, pool=pod.pool, pod=succeeded)
    if not remove:
        return [done]
    return [done, pod_removed(pod, stable_id("PodRemoved", decision_id), ts)]
