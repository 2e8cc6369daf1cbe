"""In-process simulation: a deterministic model of the live pipeline (``simulate --live``) on one scenario.

The model keeps the cluster-events log the way the live partitions hold it and decides the way the processor
does (``kai_stream/streams/engine.py``):

* the scenario's observed events come first; the log has ``partitions`` partitions (the cluster-events topic
  spec), a pool's events go to ``partition_for(pool)``, cluster-wide ones (pool ``*``) to every partition,
  and offsets count per partition as the broker's do;
* a round starts with a barrier: one ``Tick`` for every pool (``ALL_POOLS``, so one record in every partition,
  event id ``stable_id("round-barrier", str(round))``, the latest event time), which is what
  ``simulate --live`` publishes once the log holds the previous round's whole reaction (its processor runs
  cycles only on a Tick, ``KAI_STREAM_PROCESSOR_CYCLE_ON=tick``);
* a round runs, per pool (sorted), ``run_cycle`` with ``input_offset`` = the offset of the last event in that
  pool's partition (the barrier) and ``ts`` = the latest event time; its decisions are chained after the pool's
  head hash and folded *without* an offset (they live in the decisions topic, not in cluster-events);
* then the cluster reacts, all of it before the next round (``simulate --live`` only lets the processor
  decide once the binder and the connector are done, so rounds are the same on both sides): per decision, in
  order, what the binder and the connector publish into cluster-events (``follow_ups``):
  ``BindRequested`` -> ``PodBound`` then the pod observed on its node, ``Running``;
  ``EvictionRequested`` -> the pod observed again (the binder's ``DisruptionTarget`` condition), ``PodEvicted``,
  then the pod observed terminating (``deletionTimestamp``); with a termination grace of 0 instead ``PodRemoved``
  at once, then, for a pod that comes back
  (``recreated_after_eviction``), its replacement observed pending: same name, uid
  ``stable_id("recreated", old uid)``; ``PodPending`` -> the pod observed again when the binder's
  ``PodScheduled=False`` message for it changes, and its PodGroup observed when the group's
  ``UnschedulableOnNodePool`` message changes (a bind that follows clears the group's mark: observed again);
  ``PodPipelined`` -> nothing;
* the clock: rounds take no time. After a round that decides nothing, if evicted pods are still terminating,
  the clock jumps by the termination grace (``termination_grace``, default 30 s as Kubernetes'): each of them
  is removed (``PodRemoved`` at the new time, pods by uid) and its replacement, if any, observed; the next
  round's barrier carries that time. A preemptor placed on a terminating pod's resources is therefore
  ``Pipelined`` until this jump and bound in the round after it;
* it stops after the first round that decides nothing with no pod terminating (or after ``cycles`` rounds).
  ``duration_s`` is not played out here.

Evicted pods: a pod moved by consolidation (its eviction names ``move_to``; KAI only moves pods whose
workload controller restarts them), or labelled ``kai.scheduler/recreate-on-evict: "true"``, comes back
pending under the same name with a new uid and is scheduled again (not necessarily on the node it was moved
to: the nomination belonged to the old pod); any other evicted pod (or one labelled ``"false"``) is gone for
good. Live, the simulated cluster re-creates labelled pods (``connectors/simcluster/controller.py``) and
``simulate --live`` stands in for the controllers of moved pods (``Pipeline.run_rounds``).

JSON (``to_json``, the contract of architecture.md): every managed pod that exists at the end, with status
``Running`` (bound, or a bind decided and not yet confirmed), ``Pipelined`` (nominated to a node that is
still being freed) or ``Pending``; plus ``Evicted`` for a pod whose eviction was final (not re-created).
Queues: fair share and allocation summed over pools. Decisions: every decision, rounds in order, pools sorted.

Report units: GPU in devices (float), CPU in millicores, memory in MB (10^6 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    ALL_POOLS,
    BindRequested,
    ClusterEvent,
    Decision,
    EvictionRequested,
    NodeRemoved,
    ObjectKey,
    ObservedBase,
    ObservedEvent,
    PodBound,
    PodEvicted,
    PodGroupObserved,
    PodGroupRemoved,
    PodObserved,
    PodPending,
    PodRemoved,
    PodSpec,
    QueueRemoved,
    Tick,
    chain,
    content_digest,
    event_key,
    stable_id,
)
from kai_stream.core.scheduler.cycle import plugins_of, run_cycle
from kai_stream.core.scheduler.framework.info import CPU, GPU, MEM, UNIT
from kai_stream.core.scheduler.framework.reuse import open_session
from kai_stream.core.state import ClusterState, apply
from kai_stream.kafka import partition_for
from kai_stream.topics import load_specs

__all__ = [
    "ClusterLog",
    "EmulatedCluster",
    "Marks",
    "SimulationResult",
    "cluster_events_partitions",
    "follow_ups",
    "outcome_of",
    "pod_bound",
    "pod_evicted",
    "pod_removed",
    "pools_of",
    "recreated_after_eviction",
    "recreated_uid",
    "removal",
    "round_barrier",
    "simulate",
]

MB = 10**6


@dataclass
class SimulationResult:
    state: ClusterState
    config: SchedulerConfig
    decisions: list[Decision]
    evicted: dict[str, tuple[str, str]] = field(default_factory=dict)
    cycles: int = 0
    settled: bool = False

    def _queue_of(self, namespace: str, pod_group: str | None, label: str) -> str:
        if label:
            return label
        group = self.state.pod_groups.get(f"{namespace}/{pod_group}") if pod_group else None
        return group.queue if group is not None else self.config.default_queue

    def pods(self) -> dict[str, dict[str, Any]]:
        state = self.state
        out: dict[str, dict[str, Any]] = {}
        for pod in sorted(state.pods.values(), key=lambda p: p.key):
            if not pod.managed or pod.phase in ("Succeeded", "Failed"):
                continue
            queue = self._queue_of(pod.namespace, pod.pod_group, pod.queue)
            assumed = state.assumed.get(pod.uid)
            pipelined = state.pipelined.get(pod.uid)
            if pod.node_name is not None or assumed is not None:
                node = pod.node_name or (assumed.node if assumed else None)
                indices = pod.gpu_indices if pod.node_name else (assumed.gpu_indices if assumed else None)
                entry = {"status": "Running", "node": node, "gpu_indices": list(indices) if indices else None}
            elif pipelined is not None:
                entry = {
                    "status": "Pipelined",
                    "node": pipelined.node,
                    "gpu_indices": list(pipelined.gpu_indices) or None,
                }
            else:
                entry = {"status": "Pending", "node": None, "gpu_indices": None}
            out[pod.key] = {
                "status": entry["status"],
                "queue": queue,
                "node": entry["node"],
                "gpu_indices": entry["gpu_indices"],
            }
        for key, queue in sorted(self.evicted.values()):
            if key not in out:
                out[key] = {"status": "Evicted", "queue": queue, "node": None, "gpu_indices": None}
        return dict(sorted(out.items()))

    def queues(self) -> dict[str, dict[str, dict[str, float]]]:
        totals: dict[str, dict[str, list[int]]] = {
            name: {"fair_share": [0, 0, 0], "allocated": [0, 0, 0]} for name in sorted(self.state.queues)
        }
        for pool in pools_of(self.state):
            state, config = self.state, self.config
            plugins = plugins_of(config)
            session = open_session(state, config, plugins, pool=pool, input_offset=state.offset, code_version="")
            for name, q in session.queues.items():
                for r in (GPU, CPU, MEM):
                    totals[name]["fair_share"][r] += q.fair_share[r]
                    totals[name]["allocated"][r] += q.allocated[r]
        return {
            name: {
                kind: {"gpu": v[GPU] / UNIT, "cpu": float(v[CPU]), "memory": v[MEM] / MB} for kind, v in parts.items()
            }
            for name, parts in totals.items()
        }

    def to_json(self) -> dict[str, Any]:
        """The ``simulate --json`` contract of architecture.md."""
        return {
            "pods": self.pods(),
            "queues": self.queues(),
            "decisions": [d.model_dump(mode="json") for d in self.decisions],
        }


def pools_of(state: ClusterState) -> list[str]:
    """Every pool with a node or a pending pod of ours, sorted."""
    pools = {n.pool for n in state.nodes.values()}
    pools.update(p.pool for p in state.pods.values() if p.managed and p.node_name is None)
    return sorted(pools)


def outcome_of(decision: Decision) -> PodBound | PodEvicted | None:
    """The emulated cluster's answer to one decision (None when the decision needs no answer)."""
    if isinstance(decision, BindRequested):
        return pod_bound(decision, decision.ts)
    if isinstance(decision, EvictionRequested):
        return pod_evicted(decision, decision.ts)
    return None


def pod_bound(decision: BindRequested, ts: float, event_id: str | None = None) -> PodBound:
    """The emulated cluster's answer to a bind, at ``ts``: the pod is bound where the decision said (``event_id``
    by default from the decision's)."""
    answer = _answer(decision, ts, stable_id("PodBound", decision.decision_id) if event_id is None else event_id)
    return PodBound(**answer, node=decision.node, gpu_indices=decision.gpu_indices)


def pod_evicted(decision: EvictionRequested, ts: float, event_id: str | None = None) -> PodEvicted:
    """The emulated cluster's answer to an eviction, at ``ts`` (``event_id`` by default from the decision's)."""
    answer = _answer(decision, ts, stable_id("PodEvicted", decision.decision_id) if event_id is None else event_id)
    return PodEvicted(**answer)


def _answer(decision: BindRequested | EvictionRequested, ts: float, event_id: str) -> dict[str, Any]:
    """The fields every outcome of ``decision`` has."""
    return {
        "event_id": event_id,
        "ts": ts,
        "pool": decision.pool,
        "decision_id": decision.decision_id,
        "namespace": decision.namespace,
        "name": decision.name,
        "uid": decision.uid,
    }


LABEL_RECREATE = "kai.scheduler/recreate-on-evict"


def recreated_after_eviction(decision: EvictionRequested, labels: dict[str, str]) -> bool:
    """Whether the evicted pod comes back pending (see module doc): a consolidation move (its controller
    restarts it elsewhere), or a pod labelled ``kai.scheduler/recreate-on-evict: "true"``; never one
    labelled ``"false"``."""
    flag = labels.get(LABEL_RECREATE, "").strip().lower()
    if flag in ("true", "false"):
        return flag == "true"
    return bool(decision.details.get("move_to"))


def recreated_uid(uid: str) -> str:
    """The uid of the pod a controller creates in place of the evicted pod ``uid``."""
    return stable_id("recreated", uid)


def _observed(pod: PodSpec, why: str, decision: Decision) -> PodObserved:
    return PodObserved(event_id=stable_id(why, decision.decision_id), ts=decision.ts, pool=pod.pool, pod=pod)


@dataclass
class Marks:
    """The ``PodScheduled=False`` messages the binder has put on pods (by uid) and the
    ``UnschedulableOnNodePool`` messages on PodGroups (by (group key, pool)): a mark that changes nothing is
    not written, so it is not observed either."""

    pods: dict[str, str] = field(default_factory=dict)
    groups: dict[tuple[str, str], str] = field(default_factory=dict)


def _group_observed(state: ClusterState, pod: PodSpec, decision: Decision) -> list[ClusterEvent]:
    group = state.pod_groups.get(f"{pod.namespace}/{pod.pod_group}") if pod.pod_group else None
    if group is None:
        return []
    why = stable_id("PodGroupMarked", decision.decision_id)
    return [PodGroupObserved(event_id=why, ts=decision.ts, pool=group.pool, pod_group=group)]


def follow_ups(
    decision: Decision, state: ClusterState, marks: Marks | None = None, termination_grace: float = 0.0
) -> list[ClusterEvent]:
    """What the binder and the connector put into cluster-events after ``decision`` is applied (module doc);
    ``state`` is the state the decision was made on (before any of these events); ``marks`` what the binder
    has marked so far (updated here). With a ``termination_grace`` an evicted pod is only observed terminating
    here; its removal comes from ``removal``, once the grace period is over."""
    marks = marks if marks is not None else Marks()
    pod = state.pods.get(decision.uid)
    if isinstance(decision, PodPending):
        if pod is None or pod.node_name is not None:
            return []
        from kai_stream.binder.kube import pending_message  # the binder's own wording (heavy import: lazy)

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
    outcome = outcome_of(decision)
    if outcome is None:
        return []
    events = [outcome]
    if isinstance(decision, BindRequested):
        if pod is None or pod.node_name is not None:
            return events
        placed = {"node_name": decision.node, "gpu_indices": decision.gpu_indices or None}
        events.append(_observed(pod.model_copy(update=placed), "PodBinding", decision))
        running = {**placed, "phase": "Running", "started": pod.started if pod.started is not None else decision.ts}
        events.append(_observed(pod.model_copy(update=running), "PodRunning", decision))
        marks.pods.pop(pod.uid, None)
        group_key = (f"{pod.namespace}/{pod.pod_group}", decision.pool)
        if pod.pod_group and marks.groups.pop(group_key, None) is not None:
            events.extend(_group_observed(state, pod, decision))
        return events
    if pod is None:
        return events
    if isinstance(decision, EvictionRequested):
        events.insert(0, _observed(pod, "PodDisrupted", decision))
    marks.pods.pop(pod.uid, None)
    if termination_grace > 0 and pod.node_name is not None and isinstance(decision, EvictionRequested):
        events.append(_observed(pod.model_copy(update={"terminating": True}), "PodTerminating", decision))
        return events
    events.extend(removal(decision, pod, decision.ts))
    return events


def pod_removed(pod: PodSpec, event_id: str, ts: float) -> PodRemoved:
    """``pod`` deleted from the cluster at ``ts``."""
    return PodRemoved(event_id=event_id, ts=ts, pool=pod.pool, namespace=pod.namespace, name=pod.name, uid=pod.uid)


def removal(decision: Decision, pod: PodSpec, ts: float) -> list[ClusterEvent]:
    """The evicted ``pod`` gone at ``ts``: its removal, then its replacement if a controller re-creates it."""
    events: list[ClusterEvent] = [pod_removed(pod, stable_id("PodRemoved", decision.decision_id), ts)]
    if isinstance(decision, EvictionRequested) and recreated_after_eviction(decision, pod.labels):
        again = {
            "uid": recreated_uid(pod.uid),
            "node_name": None,
            "gpu_indices": None,
            "phase": "Pending",
            "started": None,
            "terminating": False,
        }
        recreated = pod.model_copy(update=again)
        events.append(PodObserved(event_id=stable_id("PodRecreated", decision.decision_id), ts=ts, pool=pod.pool,
                                  pod=recreated))
    return events


@dataclass
class ClusterLog:
    """Offsets of the cluster-events log, per partition, as the live broker would number them."""

    partitions: int
    last: dict[int, int] = field(default_factory=dict)

    def append(self, event: ClusterEvent) -> None:
        targets = range(self.partitions) if event.pool == ALL_POOLS else [partition_for(event.pool, self.partitions)]
        for partition in targets:
            self.last[partition] = self.last.get(partition, -1) + 1

    def offset_of(self, pool: str) -> int:
        """The offset of the last event in ``pool``'s partition (-1 when it is empty)."""
        return self.last.get(partition_for(pool, self.partitions), -1)


def cluster_events_partitions() -> int:
    """Partitions of the cluster-events topic (its spec under topics/)."""
    return next(spec.partitions for spec in load_specs() if spec.name == "cluster-events")


def round_barrier(round_number: int, ts: float) -> Tick:
    """The Tick that opens round ``round_number`` (from 1) of a simulation, live or in-process (module doc)."""
    return Tick(event_id=stable_id("round-barrier", str(round_number)), ts=ts, pool=ALL_POOLS)


@dataclass
class EmulatedCluster:
    """The cluster-events log as ``simulate`` models it (module doc): the state it folds to, per-partition
    offsets, and the binder's marks. ``replay/simulated.py`` rebuilds a simulation's log with it."""

    log: ClusterLog
    state: ClusterState = field(default_factory=ClusterState)
    marks: Marks = field(default_factory=Marks)
    termination_grace: float = 0.0
    terminating: dict[str, tuple[PodSpec, EvictionRequested]] = field(default_factory=dict)
    """Evicted pods still terminating (by uid): removed by ``end_grace``."""
    contents: dict[ObjectKey, str] = field(default_factory=dict)
    """The content of the last observation per object: the connector publishes only a change of it."""

    def observe(self, event: ClusterEvent) -> None:
        """Append ``event`` to cluster-events and fold it, unless it observes an object unchanged."""
        key = event_key(event)
        if key is not None and isinstance(event, ObservedBase):
            if not isinstance(event, NodeRemoved | PodRemoved | QueueRemoved | PodGroupRemoved):
                content = content_digest(event)
                if self.contents.get(key) == content:
                    return
                self.contents[key] = content
            else:
                self.contents.pop(key, None)
        self.log.append(event)
        apply(self.state, event, self.state.offset + 1)

    def start_round(self, round_number: int) -> None:
        """Append the barrier that opens round ``round_number`` (``round_barrier``)."""
        self.observe(round_barrier(round_number, self.state.now))

    def decide(self, decision: Decision) -> list[ClusterEvent]:
        """Fold ``decision`` (no offset: it is not in cluster-events) and return the events it will cause."""
        caused = follow_ups(decision, self.state, self.marks, self.termination_grace)
        pod = self.state.pods.get(decision.uid)
        if isinstance(decision, EvictionRequested) and pod is not None and not any(
            isinstance(e, PodRemoved) for e in caused
        ):
            self.terminating[pod.uid] = (pod, decision)
        apply(self.state, decision)
        return caused

    def end_grace(self) -> bool:
        """Advance the clock by the grace period: every terminating evicted pod is removed (pods sorted by
        uid), its replacement observed. False when none was terminating."""
        if not self.terminating:
            return False
        ts = self.state.now + self.termination_grace
        for uid in sorted(self.terminating):
            pod, decision = self.terminating[uid]
            for event in removal(decision, pod, ts):
                self.observe(event)
        self.terminating.clear()
        return True


DEFAULT_TERMINATION_GRACE_S = 30.0
"""Kubernetes' default ``terminationGracePeriodSeconds``."""


def simulate(
    events: list[ObservedEvent],
    config: SchedulerConfig,
    *,
    cycles: int = 50,
    partitions: int | None = None,
    termination_grace: float = DEFAULT_TERMINATION_GRACE_S,
) -> SimulationResult:
    """Fold ``events``, then run rounds with the emulated cluster until nothing changes (see module doc)."""
    cluster = EmulatedCluster(
        ClusterLog(partitions if partitions is not None else cluster_events_partitions()),
        termination_grace=termination_grace,
    )
    state = cluster.state
    for event in events:
        cluster.observe(event)
    heads: dict[str, str] = {}
    last_input: dict[str, int] = {}
    result = SimulationResult(state=state, config=config, decisions=[])
    for round_number in range(1, cycles + 1):
        cluster.start_round(round_number)
        decided: list[Decision] = []
        reactions: list[ClusterEvent] = []
        for pool in pools_of(state):
            offset = cluster.log.offset_of(pool)
            if offset <= last_input.get(pool, -1):
                continue
            made = run_cycle(state, config, pool=pool, input_offset=offset)
            if not made:
                continue
            linked, heads[pool] = chain(made, heads.get(pool, ""))
            last_input[pool] = offset
            for decision in linked:
                if isinstance(decision, EvictionRequested):
                    pod = state.pods.get(decision.uid)
                    if pod is None or not recreated_after_eviction(decision, pod.labels):
                        result.evicted[decision.uid] = (f"{decision.namespace}/{decision.name}", decision.queue)
                reactions.extend(cluster.decide(decision))
            decided.extend(linked)
        result.cycles += 1
        if not decided:
            if cluster.end_grace():
                continue
            result.settled = True
            break
        for reaction in reactions:
            cluster.observe(reaction)
        result.decisions.extend(decided)
    return result
