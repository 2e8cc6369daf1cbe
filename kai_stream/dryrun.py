"""``dry_run``: would one pod fit now, where, or why not, and whose pods would be evicted for it.

The state "now" is a scenario scheduled until it settles (``simulate``) or a recorded pool log folded to its end
the way the processor rebuilds it (``PartitionEngine.rebuild``: events with the decisions interleaved at their
input offsets). The pod (and its PodGroup, when the manifest has one) is observed on a copy of that state at its
latest event time, and the core runs one cycle on the copy with the log's scheduler config: the same search, the
same reasons. Nothing is published and the given state is not changed.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
import yaml

import kai_stream
from kai_stream.core.config import SchedulerConfig, parse_config
from kai_stream.core.events import (
    BindRequested,
    EvictionRequested,
    ObservedEvent,
    PodObserved,
    PodPending,
    PodPipelined,
)
from kai_stream.core.manifests import object_to_events
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, Derived, apply, job_key_of
from kai_stream.history.reader import PoolLog
from kai_stream.simulate import simulate
from kai_stream.streams.engine import PartitionEngine

Outcome = Literal["bind", "pipeline", "pending", "undecided"]


class DryRunError(ValueError):
    """The pod manifest or the log cannot be dry-run (the message says why)."""


@dataclass(frozen=True)
class Victim:
    pod: str
    queue: str
    node: str | None
    action: str


@dataclass
class DryRun:
    """What one cycle would decide for the pod: ``bind`` (node and GPUs now), ``pipeline`` (that node once the
    victims are gone), ``pending`` (``code`` and ``reason`` as the core gives them) or ``undecided``."""

    pod: str
    queue: str
    pool: str
    outcome: Outcome
    action: str | None = None
    node: str | None = None
    gpu_indices: tuple[int, ...] = ()
    code: str | None = None
    reason: str = ""
    victims: list[Victim] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "queue": self.queue,
            "pool": self.pool,
            "outcome": self.outcome,
            "fits": self.outcome in ("bind", "pipeline"),
            "action": self.action,
            "node": self.node,
            "gpu_indices": list(self.gpu_indices),
            "code": self.code,
            "reason": self.reason,
            "evicts": [
                {"pod": v.pod, "queue": v.queue, "node": v.node, "action": v.action} for v in self.victims
            ],
        }


def pod_events(text: str, config: SchedulerConfig, ts: float) -> list[ObservedEvent]:
    """The events of a manifest holding exactly one Pod (and optionally its PodGroup), observed at ``ts``. Its queue
    and group are looked up in the cluster's state, not in the file (an unknown queue is the core's reason)."""
    try:
        docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise DryRunError(f"not valid YAML: {exc}") from None
    events = [e for doc in docs for e in object_to_events(doc, ts=ts, scheduler_name=config.scheduler_name)]
    events.sort(key=lambda e: isinstance(e, PodObserved))
    pods = [e for e in events if isinstance(e, PodObserved)]
    if len(pods) != 1:
        raise DryRunError(f"the manifest must hold exactly one Pod, found {len(pods)}")
    return events


def scenario_state(events: Sequence[ObservedEvent], config: SchedulerConfig) -> ClusterState:
    """A scenario scheduled until nothing changes, as ``kai-stream simulate`` plays it."""
    return simulate(list(events), config).state


def recorded_config(log: PoolLog) -> SchedulerConfig | None:
    """The config of the log's last ConfigRecorded (None: none recorded)."""
    for record in reversed(log.configs):
        try:
            return parse_config(orjson.loads(record.config), "ConfigRecorded")
        except (ValueError, orjson.JSONDecodeError):
            continue
    return None


def log_state(log: PoolLog, config: SchedulerConfig) -> ClusterState:
    """The pool's state at the end of its recorded log, folded as the processor rebuilds it."""
    engine = PartitionEngine.for_config(0, config, kai_stream.__version__)
    engine.rebuild(zip(log.offsets, log.events, strict=True), log.decisions)
    pool = engine.pools.get(log.pool)
    return pool.state if pool is not None else engine.template


def dry_run(state: ClusterState, config: SchedulerConfig, events: Sequence[ObservedEvent]) -> DryRun:
    """One cycle on a copy of ``state`` with ``events`` (one pod, see ``pod_events``) observed at its time."""
    work = copy.deepcopy(state)
    work.derived = Derived()
    pod = next(e.pod for e in events if isinstance(e, PodObserved))
    if pod.uid in work.pods:
        raise DryRunError(f"pod {pod.key} (uid {pod.uid}) is already in the log")
    for event in events:
        apply(work, event.model_copy(update={"ts": max(event.ts, work.now)}), work.offset + 1)
    job = job_key_of(pod)
    pool = pod.pool
    decisions = run_cycle(work, config, pool=pool, input_offset=work.offset, reuse=False)
    victims = [
        Victim(f"{d.namespace}/{d.name}", d.queue, d.node, d.action)
        for d in decisions
        if isinstance(d, EvictionRequested) and d.preemptor == job
    ]
    mine = [d for d in decisions if d.uid == pod.uid]
    queue = next((d.queue for d in mine), pod.queue)
    result = DryRun(pod=pod.key, queue=queue, pool=pool, outcome="undecided", victims=victims)
    for decision in mine:
        result.action = decision.action
        if isinstance(decision, BindRequested):
            result.outcome, result.node, result.gpu_indices = "bind", decision.node, decision.gpu_indices
        elif isinstance(decision, PodPipelined):
            result.outcome, result.node, result.gpu_indices = "pipeline", decision.node, decision.gpu_indices
        elif isinstance(decision, PodPending):
            result.outcome, result.code, result.reason = "pending", decision.code, decision.reason
    return result
