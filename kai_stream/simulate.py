"""In-process simulation: a deterministic model of the live pipeline (``simulate --live``) on one scenario.

The model keeps the cluster-events log the way the live partitions hold it and decides the way the processor
does (``kai_stream/streams/engine.py``):

* the scenario's observed events come first, into ``kai_stream.emulation.EmulatedCluster``'s log (per-partition
  offsets as the broker's; cluster-wide events, pool ``*``, in every partition);
* a round starts with a barrier (``round_barrier``: one ``Tick`` in every partition, the latest event time), which
  is what ``simulate --live`` publishes once the log holds the previous round's whole reaction (its processor
  runs cycles only on a Tick, ``KAI_STREAM_PROCESSOR_CYCLE_ON=tick``);
* a round steps, per pool (sorted), ``core.decide`` with ``input_offset`` = the offset of the last event in that
  pool's partition (the barrier): cycle, chain after the pool's head hash, fold *without* an offset (decisions
  live in the decisions topic, not in cluster-events);
* then the cluster reacts, all of it before the next round (``simulate --live`` only lets the processor
  decide once the binder and the connector are done, so rounds are the same on both sides): per decision, in
  order, ``kai_stream.emulation.react`` under the default policy (every intermediate observation, re-created
  pods by label or consolidation move, evicted pods on a node observed terminating);
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
good. Live, the simulated cluster re-creates labelled pods (``kai_stream/connectors/simcluster/controller.py``) and
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
from kai_stream.core.decide import decide
from kai_stream.core.events import ClusterEvent, Decision, EvictionRequested, ObservedEvent
from kai_stream.core.scheduler.cycle import plugins_of
from kai_stream.core.scheduler.framework.info import CPU, GPU, MEM, UNIT
from kai_stream.core.scheduler.framework.reuse import open_session
from kai_stream.core.state import ClusterState
from kai_stream.emulation import DEFAULT_TERMINATION_GRACE_S, EmulatedCluster, recreated_after_eviction

__all__ = ["DEFAULT_TERMINATION_GRACE_S", "SimulationResult", "pools_of", "simulate"]

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


def simulate(
    events: list[ObservedEvent],
    config: SchedulerConfig,
    *,
    cycles: int = 50,
    partitions: int | None = None,
    termination_grace: float = DEFAULT_TERMINATION_GRACE_S,
) -> SimulationResult:
    """Fold ``events``, then run rounds with the emulated cluster until nothing changes (see module doc)."""
    cluster = EmulatedCluster.of(events, partitions=partitions, termination_grace=termination_grace)
    state = cluster.state
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
            linked, head = decide(state, config, pool=pool, head=heads.get(pool, ""), input_offset=offset)
            if not linked:
                continue
            heads[pool] = head
            last_input[pool] = offset
            for decision, _ in linked:
                if isinstance(decision, EvictionRequested):
                    pod = state.pods.get(decision.uid)
                    if pod is None or not recreated_after_eviction(decision, pod.labels):
                        result.evicted[decision.uid] = (f"{decision.namespace}/{decision.name}", decision.queue)
                reactions.extend(cluster.react(decision))
                decided.append(decision)
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
