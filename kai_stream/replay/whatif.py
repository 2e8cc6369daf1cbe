"""What-if: re-run the observed part of a recorded history under another config and compare outcomes.

Not a byte comparison but a full re-simulation. From the recorded log only what the cluster *did
independently of the scheduler* is kept: each managed pod's first observation (arrival, or running when the
log starts), nodes, queues, pod groups, priority classes, topologies, GPU health, ticks, deletions of pods the
recorded run did not evict or finish (a user's), and removals of pod groups that still had such a pod. Binder
outcomes, later pod observations and the removals of what was evicted or finished are consequences of the
recorded decisions, so they are dropped and re-emulated by
``kai_stream.replay.engine`` (bind succeeds at once; a pod with
``duration_s`` runs that long; eviction removes the pod). A simulated run's history (a trace run) records its
``Emulation`` (``ConfigRecorded.emulation``): both sides are then re-run with its answers (an evicted pod is
restarted and waits again) and its clock (a cycle per event time), so the baseline reproduces its decisions.

Cycles come where the recorded run had them, whatever its event times: after the event at each recorded
decision's ``input_offset`` (the last event kept at or before it) and after every ``Tick``; a live log, whose
events each carry their own time, is thus not re-run a cycle per event. A log with neither (a bare scenario)
cycles per event time. Both sides are re-simulated the same way: the baseline with the recorded config and
queues, the what-if with the other config and queue overrides, so every difference comes from the config and
not from the emulation.

A what-if file is a multi-document YAML: one plain mapping is a ``SchedulerConfig`` (omitted = the recorded
one) and any ``Queue`` manifests (``scheduling.run.ai/v2``) replace the recorded queues of the same name.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import yaml

from kai_stream.core.config import SchedulerConfig, config_hash, parse_config
from kai_stream.core.events import (
    BindRequested,
    ClusterEvent,
    Decision,
    EvictionRequested,
    GpuHealthObserved,
    NodeObserved,
    NodeRemoved,
    ObservedEvent,
    PodEvicted,
    PodGroupObserved,
    PodGroupRemoved,
    PodObserved,
    PodRemoved,
    PriorityClassObserved,
    QueueObserved,
    QueueRemoved,
    QueueSpec,
    Tick,
    TopologyObserved,
)
from kai_stream.core.manifests import object_to_events
from kai_stream.emulation import Emulation, emulation_of
from kai_stream.history.reader import History, PoolLog
from kai_stream.replay.engine import run_engine

__all__ = [
    "PodOutcome",
    "QueueMetrics",
    "WhatIfPool",
    "WhatIfReport",
    "WhatIfSpec",
    "load_whatif",
    "observed_cycles",
    "observed_only",
    "pod_outcomes",
    "queue_metrics",
    "run_whatif",
]

_OBSERVED = (
    NodeObserved,
    NodeRemoved,
    PodObserved,
    PodRemoved,
    QueueObserved,
    QueueRemoved,
    PodGroupObserved,
    PodGroupRemoved,
    PriorityClassObserved,
    TopologyObserved,
    GpuHealthObserved,
    Tick,
)


@dataclass(frozen=True)
class WhatIfSpec:
    """The other config and the queues it overrides (by name)."""

    config: SchedulerConfig | None = None
    queues: dict[str, QueueSpec] = field(default_factory=dict)
    source: str = ""


def load_whatif(path: str | Path) -> WhatIfSpec:
    """Read a what-if file: a ``SchedulerConfig`` mapping and/or ``Queue`` manifests; errors name the field."""
    file = Path(path)
    try:
        docs = [d for d in yaml.safe_load_all(file.read_text()) if d is not None]
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{file}: cannot read what-if file: {exc}") from None
    config: SchedulerConfig | None = None
    queues: dict[str, QueueSpec] = {}
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ValueError(f"{file}: document #{i}: expected a mapping, got {type(doc).__name__}")
        if "kind" in doc:
            for event in object_to_events(doc, ts=0.0):
                if not isinstance(event, QueueObserved):
                    raise ValueError(f"{file}: document #{i}: only Queue manifests can override, got {doc['kind']}")
                queues[event.queue.name] = event.queue
        else:
            if config is not None:
                raise ValueError(f"{file}: document #{i}: a second scheduler config")
            config = parse_config(doc, f"{file} (document #{i})")
    return WhatIfSpec(config=config, queues=queues, source=str(file))


def observed_only(log: PoolLog) -> list[ObservedEvent]:
    """What the cluster did on its own: see the module rules. Order and event times are kept."""
    return [event for batch in observed_cycles(log) for event in batch]


def _scheduler_removed_groups(log: PoolLog, released: set[str]) -> set[tuple[str, str]]:
    """Pod groups (namespace, name) all of whose pods the recorded run evicted or finished: their removal followed
    from its decisions. A group with a pod a user deleted, or with none, keeps its recorded removal."""
    members: dict[tuple[str, str], set[str]] = {}
    for event in log.events:
        if isinstance(event, PodObserved) and event.pod.pod_group is not None:
            members.setdefault((event.pod.namespace, event.pod.pod_group), set()).add(event.pod.uid)
    return {group for group, uids in members.items() if uids <= released}


def observed_cycles(log: PoolLog, *, by_time: bool | None = None) -> list[list[ObservedEvent]]:
    """What the cluster did on its own (module rules), cut where the recorded run cycled (module docs);
    ``by_time``: also cut at every change of event time (a trace run cycled at each)."""
    released: set[str] = set()
    for event in log.events:
        if isinstance(event, PodEvicted):
            released.add(event.uid)
        elif isinstance(event, PodObserved) and event.pod.phase in ("Succeeded", "Failed") and event.pod.managed:
            released.add(event.pod.uid)
    consequences = _scheduler_removed_groups(log, released)
    cycled = {d.input_offset for d in log.decisions}
    if by_time is None:
        by_time = not cycled and not any(isinstance(event, Tick) for event in log.events)
    seen: set[str] = set()
    batches: list[list[ObservedEvent]] = []
    batch: list[ObservedEvent] = []
    for offset, event in zip(log.offsets, log.events, strict=True):
        keep = isinstance(event, _OBSERVED)
        if isinstance(event, PodObserved) and event.pod.managed:
            keep = event.pod.uid not in seen
            seen.add(event.pod.uid)
        elif isinstance(event, PodRemoved):
            keep = event.uid not in released
        elif isinstance(event, PodGroupRemoved):
            keep = (event.namespace, event.name) not in consequences
        if keep and isinstance(event, _OBSERVED):
            if by_time and batch and event.ts != batch[-1].ts:
                batches.append(batch)
                batch = []
            batch.append(event)
        if batch and (offset in cycled or isinstance(event, Tick)):
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)
    return batches


def _override(batches: Sequence[Sequence[ObservedEvent]], queues: dict[str, QueueSpec]) -> list[list[ObservedEvent]]:
    if not queues:
        return [list(batch) for batch in batches]
    out: list[list[ObservedEvent]] = []
    seen: set[str] = set()
    for batch in batches:
        out.append([])
        for event in batch:
            if isinstance(event, QueueObserved) and event.queue.name in queues:
                seen.add(event.queue.name)
                original = event.queue
                spec = queues[original.name].model_copy(update={"uid": original.uid, "created": original.created})
                event = event.model_copy(update={"queue": spec})
            out[-1].append(event)
    first_ts = batches[0][0].ts if batches else 0.0
    missing: list[ObservedEvent] = [
        QueueObserved(event_id=f"whatif-queue-{name}", ts=first_ts, pool="*", queue=spec)
        for name, spec in sorted(queues.items())
        if name not in seen
    ]
    if not out:
        return [missing] if missing else []
    out[0] = [*missing, *out[0]]
    return out


# ---------------------------------------------------------------------- outcomes


@dataclass
class PodOutcome:
    """One pod's story in a run: arrival, first bind, evictions, finish."""

    key: str
    uid: str
    queue: str
    gpu_milli: int
    arrival: float
    bound_at: float | None = None
    node: str | None = None
    evictions: list[tuple[float, str, str | None]] = field(default_factory=list)
    finished_at: float | None = None

    def wait(self, end: float) -> float:
        return (self.bound_at if self.bound_at is not None else end) - self.arrival

    @property
    def status(self) -> str:
        if self.evictions and (self.bound_at is None or self.evictions[-1][0] >= self.bound_at):
            return "Evicted"
        if self.finished_at is not None:
            return "Succeeded"
        return "Running" if self.bound_at is not None else "Pending"

    def gpu_seconds(self, end: float) -> float:
        if self.bound_at is None:
            return 0.0
        stop = end
        if self.finished_at is not None:
            stop = min(stop, self.finished_at)
        if self.evictions:
            stop = min(stop, max(t for t, _, _ in self.evictions))
        return max(0.0, stop - self.bound_at) * self.gpu_milli / 1000.0


def pod_outcomes(events: Iterable[ClusterEvent], decisions: Iterable[Decision]) -> dict[str, PodOutcome]:
    """Outcomes of managed pods from a log (events for arrivals/finishes, decisions for binds/evictions)."""
    pods: dict[str, PodOutcome] = {}
    for event in events:
        if isinstance(event, PodObserved) and event.pod.managed:
            pod = event.pod
            outcome = pods.get(pod.uid)
            if outcome is None:
                outcome = pods[pod.uid] = PodOutcome(pod.key, pod.uid, pod.queue, pod.requests.gpu_milli, event.ts)
                if pod.node_name is not None:
                    outcome.bound_at, outcome.node = event.ts, pod.node_name
            if pod.phase in ("Succeeded", "Failed") and outcome.finished_at is None:
                outcome.finished_at = event.ts
    for decision in decisions:
        outcome = pods.get(decision.uid)
        if outcome is None:
            continue
        if decision.queue:
            outcome.queue = decision.queue
        if isinstance(decision, BindRequested) and outcome.bound_at is None:
            outcome.bound_at, outcome.node = decision.ts, decision.node
        elif isinstance(decision, EvictionRequested):
            outcome.evictions.append((decision.ts, decision.action, decision.preemptor))
    return pods


@dataclass(frozen=True)
class QueueMetrics:
    pods: int
    bound: int
    pending: int
    mean_wait_s: float
    p50_wait_s: float
    max_wait_s: float
    gpu_hours: float
    evictions: int


def queue_metrics(outcomes: dict[str, PodOutcome], end: float) -> dict[str, QueueMetrics]:
    """Per queue: wait (a never-bound pod counts its wait until ``end``), allocation, evictions suffered."""
    by_queue: dict[str, list[PodOutcome]] = {}
    for outcome in sorted(outcomes.values(), key=lambda o: o.key):
        by_queue.setdefault(outcome.queue or "?", []).append(outcome)
    out: dict[str, QueueMetrics] = {}
    for queue, pods in sorted(by_queue.items()):
        waits = [p.wait(end) for p in pods]
        out[queue] = QueueMetrics(
            pods=len(pods),
            bound=sum(1 for p in pods if p.bound_at is not None),
            pending=sum(1 for p in pods if p.bound_at is None),
            mean_wait_s=statistics.fmean(waits),
            p50_wait_s=statistics.median(waits),
            max_wait_s=max(waits),
            gpu_hours=sum(p.gpu_seconds(end) for p in pods) / 3600.0,
            evictions=sum(len(p.evictions) for p in pods),
        )
    return out


# ---------------------------------------------------------------------- runs


@dataclass
class WhatIfPool:
    pool: str
    end: float
    baseline: dict[str, PodOutcome]
    whatif: dict[str, PodOutcome]
    baseline_queues: dict[str, QueueMetrics]
    whatif_queues: dict[str, QueueMetrics]
    baseline_decisions: int
    whatif_decisions: int

    def changed_pods(self) -> list[tuple[PodOutcome, PodOutcome | None]]:
        """Pods whose outcome differs (node, bind time, status, evictions), biggest wait change first."""
        changed: list[tuple[PodOutcome, PodOutcome | None]] = []
        for uid, before in sorted(self.baseline.items()):
            after = self.whatif.get(uid)
            if after is None or (before.node, before.bound_at, before.status, len(before.evictions)) != (
                after.node,
                after.bound_at,
                after.status,
                len(after.evictions),
            ):
                changed.append((before, after))

        def size(pair: tuple[PodOutcome, PodOutcome | None]) -> float:
            before, after = pair
            return abs(before.wait(self.end) - after.wait(self.end)) if after is not None else float("inf")

        return sorted(changed, key=lambda pair: (-size(pair), pair[0].key))


@dataclass
class WhatIfReport:
    source: str
    baseline_config: str
    whatif_config: str
    queue_overrides: list[str]
    pools: dict[str, WhatIfPool]

    def as_dict(self) -> dict[str, object]:
        def queues(metrics: dict[str, QueueMetrics]) -> dict[str, dict[str, float | int]]:
            return {name: vars(m) for name, m in metrics.items()}

        return {
            "source": self.source,
            "baseline_config_hash": self.baseline_config,
            "whatif_config_hash": self.whatif_config,
            "queue_overrides": self.queue_overrides,
            "pools": {
                name: {
                    "end": p.end,
                    "baseline": queues(p.baseline_queues),
                    "whatif": queues(p.whatif_queues),
                    "changed_pods": [
                        {
                            "pod": before.key,
                            "queue": before.queue,
                            "baseline": {"node": before.node, "bound_at": before.bound_at, "status": before.status},
                            "whatif": None
                            if after is None
                            else {"node": after.node, "bound_at": after.bound_at, "status": after.status},
                            "wait_delta_s": None if after is None else after.wait(p.end) - before.wait(p.end),
                        }
                        for before, after in p.changed_pods()
                    ],
                }
                for name, p in sorted(self.pools.items())
            },
        }


def _recorded_config(log: PoolLog) -> SchedulerConfig:
    for record in reversed(log.configs):
        try:
            return parse_config(orjson.loads(record.config), "ConfigRecorded")
        except (ValueError, orjson.JSONDecodeError):
            continue
    return SchedulerConfig()


def _recorded_emulation(log: PoolLog) -> Emulation | None:
    for record in reversed(log.configs):
        if record.emulation:
            return emulation_of(record.emulation)
    return None


def run_whatif(
    history: History, spec: WhatIfSpec, *, baseline: SchedulerConfig | None = None, tick_cycles: bool = False
) -> WhatIfReport:
    """Re-simulate every pool under the recorded config and under ``spec``; compare outcomes.

    ``tick_cycles`` (off by default, for speed on long logs): also run a cycle after batches that only
    advance time; see ``kai_stream.replay.engine.run_engine``.
    """
    pools: dict[str, WhatIfPool] = {}
    base_hash = other_hash = ""
    for name, log in sorted(history.pools.items()):
        emulation = _recorded_emulation(log)
        observed = observed_cycles(log, by_time=emulation.cycle_every <= 0 if emulation is not None else None)
        if not observed:
            continue
        base_config = baseline or _recorded_config(log)
        other_config = spec.config or base_config
        base_hash, other_hash = config_hash(base_config), config_hash(other_config)
        rounds = emulation.max_cycles if emulation is not None else 50
        before = run_engine(
            (), base_config, cycles=observed, pool=name, tick_cycles=tick_cycles, emulation=emulation,
            max_cycles=rounds,
        )
        after = run_engine(
            (), other_config, cycles=_override(observed, spec.queues), pool=name, tick_cycles=tick_cycles,
            emulation=emulation, max_cycles=rounds,
        )
        end = max(
            before.log.events[-1].ts if before.log.events else 0.0,
            after.log.events[-1].ts if after.log.events else 0.0,
        )
        base_out = pod_outcomes(before.log.events, before.log.decisions)
        other_out = pod_outcomes(after.log.events, after.log.decisions)
        pools[name] = WhatIfPool(
            pool=name,
            end=end,
            baseline=base_out,
            whatif=other_out,
            baseline_queues=queue_metrics(base_out, end),
            whatif_queues=queue_metrics(other_out, end),
            baseline_decisions=len(before.log.decisions),
            whatif_decisions=len(after.log.decisions),
        )
    return WhatIfReport(
        source=history.source,
        baseline_config=base_hash,
        whatif_config=other_hash,
        queue_overrides=sorted(spec.queues),
        pools=pools,
    )
