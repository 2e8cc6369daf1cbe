"""In-process simulation: fold a scenario's events, run cycles, emulate the cluster's reaction, report.

The emulated cluster (kept simple so that the live pipeline can reproduce it exactly):

* a cycle runs every pool (sorted by name) on the same state, at ``input_offset`` = the offset of the last
  event folded, with ``ts`` = the latest event time; decisions are chained per pool (``prev_hash``);
* after a cycle, its decisions are folded in order, then one outcome per decision, in the same order and
  at the same ``ts``: ``BindRequested`` -> ``PodBound`` (the pod is Running on that node and GPUs),
  ``EvictionRequested`` -> ``PodEvicted`` (the pod is gone and reported ``Evicted``); ``PodPipelined`` and
  ``PodPending`` have no outcome;
* a pod that a cycle both evicted and pipelined elsewhere (a consolidation move) is re-created pending under
  the same name right after its ``PodEvicted`` and its ``PodPipelined`` nomination is folded again, as a
  workload controller would restart it; the next cycle binds it on the nominated node;
* it stops after the first cycle that decides nothing new (or after ``cycles`` cycles). Time does not
  advance, so ``duration_s`` is not played out here.

Report units: GPU in devices (float), CPU in millicores, memory in MB (10^6 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    AnyEvent,
    BindRequested,
    Decision,
    EvictionRequested,
    ObservedEvent,
    PodBound,
    PodEvicted,
    PodObserved,
    PodPipelined,
    chain,
    stable_id,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.scheduler.framework.info import CPU, GPU, MEM, UNIT
from kai_stream.core.scheduler.framework.session import open_session
from kai_stream.core.state import ClusterState, apply

__all__ = ["SimulationResult", "outcome_of", "pools_of", "simulate"]

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
            session = open_session(self.state, self.config, pool=pool, input_offset=self.state.offset, code_version="")
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


def outcome_of(decision: Decision) -> AnyEvent | None:
    """The emulated cluster's answer to one decision (None when the decision needs no answer)."""
    if isinstance(decision, BindRequested):
        return PodBound(
            event_id=stable_id("PodBound", decision.decision_id),
            ts=decision.ts,
            pool=decision.pool,
            decision_id=decision.decision_id,
            namespace=decision.namespace,
            name=decision.name,
            uid=decision.uid,
            node=decision.node,
            gpu_indices=decision.gpu_indices,
        )
    if isinstance(decision, EvictionRequested):
        return PodEvicted(
            event_id=stable_id("PodEvicted", decision.decision_id),
            ts=decision.ts,
            pool=decision.pool,
            decision_id=decision.decision_id,
            namespace=decision.namespace,
            name=decision.name,
            uid=decision.uid,
        )
    return None


def _moves(decided: list[Decision], state: ClusterState) -> dict[str, tuple[PodObserved, PodPipelined]]:
    """Pods a cycle moved (evicted and pipelined elsewhere, consolidation): the emulated controller re-creates
    each one pending under the same name right after its eviction, and its nomination is folded again."""
    evicted = {d.uid for d in decided if isinstance(d, EvictionRequested)}
    out: dict[str, tuple[PodObserved, PodPipelined]] = {}
    for d in decided:
        pod = state.pods.get(d.uid)
        if isinstance(d, PodPipelined) and d.uid in evicted and pod is not None:
            again = pod.model_copy(update={"node_name": None, "gpu_indices": None, "phase": "Pending", "started": None})
            observed = PodObserved(event_id=stable_id("PodRestarted", d.decision_id), ts=d.ts, pool=d.pool, pod=again)
            out[d.uid] = (observed, d)
    return out


def simulate(events: list[ObservedEvent], config: SchedulerConfig, *, cycles: int = 50) -> SimulationResult:
    """Fold ``events``, then run cycles with the emulated cluster until nothing changes (see module doc)."""
    state = ClusterState()
    for event in events:
        apply(state, event, state.offset + 1)
    heads: dict[str, str] = {}
    result = SimulationResult(state=state, config=config, decisions=[])
    for _ in range(cycles):
        decided: list[Decision] = []
        offset = state.offset
        for pool in pools_of(state):
            made = run_cycle(state, config, pool=pool, input_offset=offset)
            linked, heads[pool] = chain(made, heads.get(pool, ""))
            decided.extend(linked)
        result.cycles += 1
        if not decided:
            result.settled = True
            break
        moves = _moves(decided, state)
        for decision in decided:
            apply(state, decision, state.offset + 1)
        for decision in decided:
            if isinstance(decision, EvictionRequested) and decision.uid not in moves:
                result.evicted[decision.uid] = (f"{decision.namespace}/{decision.name}", decision.queue)
            outcome = outcome_of(decision)
            if outcome is not None:
                apply(state, outcome, state.offset + 1)
                if isinstance(outcome, PodEvicted) and decision.uid in moves:
                    apply(state, moves[decision.uid][0], state.offset + 1)
        for _, nomination in moves.values():
            apply(state, nomination, state.offset + 1)
        result.decisions.extend(decided)
    return result
