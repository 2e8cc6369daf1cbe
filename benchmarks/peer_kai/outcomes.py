"""Where a scenario's pods ended up on a live API server, and how two schedulers' outcomes compare.

A scenario pod is *bound* when the server shows it with a ``spec.nodeName`` and no deletion under way,
*evicted* when it is gone or being deleted (no controller here deletes pods but the scheduler), *pending*
otherwise. Its queue is its PodGroup's ``spec.queue`` when it names one (``pod-group-name``), else its
``kai.scheduler/queue`` label.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

State = Literal["bound", "pending", "evicted"]
STATES: tuple[State, ...] = ("bound", "pending", "evicted")


@dataclass(frozen=True)
class PodOutcome:
    key: str
    queue: str
    state: State
    node: str | None


def key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace') or 'default'}/{meta['name']}"


def scheduled_pods(objs: list[dict[str, Any]], scheduler_name: str = "kai-scheduler") -> list[dict[str, Any]]:
    return [o for o in objs if o.get("kind") == "Pod" and (o.get("spec") or {}).get("schedulerName") == scheduler_name]


def podgroup_queues(objs: list[dict[str, Any]]) -> dict[str, str]:
    return {key(o): str((o.get("spec") or {}).get("queue", "")) for o in objs if o.get("kind") == "PodGroup"}


def queue_of(pod: dict[str, Any], groups: dict[str, str]) -> str:
    meta = pod["metadata"]
    group = (meta.get("annotations") or {}).get("pod-group-name")
    if group:
        namespace = meta.get("namespace") or "default"
        if f"{namespace}/{group}" in groups:
            return groups[f"{namespace}/{group}"]
    return str((meta.get("labels") or {}).get("kai.scheduler/queue", "-"))


def outcomes(scenario: list[dict[str, Any]], live: dict[str, dict[str, Any]]) -> dict[str, PodOutcome]:
    """The outcome of each scheduled pod of ``scenario`` given the server's pods by ``namespace/name``."""
    groups = podgroup_queues(scenario)
    result = {}
    for pod in scheduled_pods(scenario):
        name = key(pod)
        seen = live.get(name)
        state: State
        node = None
        if seen is None or seen["metadata"].get("deletionTimestamp"):
            state = "evicted"
        elif (seen.get("spec") or {}).get("nodeName"):
            state, node = "bound", str(seen["spec"]["nodeName"])
        else:
            state = "pending"
        result[name] = PodOutcome(name, queue_of(pod, groups), state, node)
    return result


def per_queue(found: dict[str, PodOutcome]) -> dict[str, Counter[str]]:
    counts: dict[str, Counter[str]] = {}
    for outcome in found.values():
        counts.setdefault(outcome.queue, Counter())[outcome.state] += 1
    return dict(sorted(counts.items()))


@dataclass(frozen=True)
class Difference:
    pod: str
    ours: PodOutcome | None
    theirs: PodOutcome | None

    def describe(self) -> str:
        def show(outcome: PodOutcome | None) -> str:
            if outcome is None:
                return "absent"
            return f"{outcome.state} on {outcome.node}" if outcome.node else outcome.state
        return f"{self.pod}: {show(self.ours)} vs {show(self.theirs)}"


def differences(ours: dict[str, PodOutcome], theirs: dict[str, PodOutcome],
                nodes: bool = False) -> list[Difference]:
    """Pods whose state differs (with ``nodes``, also bound pods on different nodes)."""
    found = []
    for pod in sorted(set(ours) | set(theirs)):
        a, b = ours.get(pod), theirs.get(pod)
        if a is None or b is None or a.state != b.state or (nodes and a.node != b.node):
            found.append(Difference(pod, a, b))
    return found
