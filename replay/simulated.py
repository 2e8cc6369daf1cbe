"""Replay of an in-process simulation (``kai_stream.simulate``): scenario events + the decisions it made.

The simulation keeps one log for everything: the scenario's events at offsets 0..n-1, then per cycle every
pool's decisions (pools sorted, all run on the same state at ``input_offset`` = the last offset folded), each
folded at the next offset, then one outcome per decision (``kai_stream.simulate.outcome_of``), then for a pod
the cycle both evicted and pipelined (a move) its re-created pending observation right after its eviction
and its nomination folded again (the contract in ``kai_stream/simulate.py``). Replay rebuilds the same log
around the recorded decisions and checks each cycle: its ``input_offset`` must be where the rebuilt log
stands, and ``run_cycle`` must return the recorded decisions byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    AnyEvent,
    Decision,
    EvictionRequested,
    ObservedEvent,
    PodEvicted,
    PodObserved,
    PodPipelined,
    decision_hash,
    dumps,
    stable_id,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply
from kai_stream.simulate import outcome_of, pools_of
from replay.diff import Divergence
from replay.runner import PoolReplay, ReplayReport

__all__ = ["replay_simulation"]


def _cycles(decisions: Sequence[Decision]) -> list[list[int]]:
    groups: list[list[int]] = []
    for i, decision in enumerate(decisions):
        if groups and decisions[groups[-1][0]].input_offset == decision.input_offset:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _restarts(batch: Sequence[Decision], state: ClusterState) -> dict[str, tuple[PodObserved, PodPipelined]]:
    evicted = {d.uid for d in batch if isinstance(d, EvictionRequested)}
    out: dict[str, tuple[PodObserved, PodPipelined]] = {}
    for d in batch:
        pod = state.pods.get(d.uid)
        if isinstance(d, PodPipelined) and d.uid in evicted and pod is not None:
            again = pod.model_copy(update={"node_name": None, "gpu_indices": None, "phase": "Pending", "started": None})
            observed = PodObserved(event_id=stable_id("PodRestarted", d.decision_id), ts=d.ts, pool=d.pool, pod=again)
            out[d.uid] = (observed, d)
    return out


def _fold(state: ClusterState, event: AnyEvent) -> None:
    apply(state, event, state.offset + 1)


def replay_simulation(
    events: Sequence[ObservedEvent], decisions: Sequence[Decision], config: SchedulerConfig
) -> ReplayReport:
    """Rebuild every decision of ``simulate(events, config)`` from ``events`` and compare bytes."""
    state = ClusterState()
    for event in events:
        _fold(state, event)
    results: dict[str, PoolReplay] = {}
    heads: dict[str, str] = {}
    for d in decisions:
        results.setdefault(d.pool, PoolReplay(pool=d.pool, events=0)).decisions += 1
    report = ReplayReport(source="simulation")

    def diverged(i: int, recorded: Decision | None, rebuilt: Decision | None, why: str) -> None:
        subject = recorded or rebuilt
        assert subject is not None
        pool = results.setdefault(subject.pool, PoolReplay(pool=subject.pool))
        pool.divergences.append(Divergence(subject.pool, i, i, subject.input_offset, recorded, rebuilt, why))

    for group in _cycles(decisions):
        batch = [decisions[i] for i in group]
        offset = batch[0].input_offset
        if offset != state.offset:
            for i in group:
                diverged(i, decisions[i], None, f"the rebuilt log stands at offset {state.offset}, not {offset}")
        else:
            rebuilt: list[Decision] = []
            version = batch[0].code_version
            for name in pools_of(state):
                rebuilt.extend(run_cycle(state, config, pool=name, input_offset=offset, code_version=version))
                results.setdefault(name, PoolReplay(pool=name)).cycles += 1
            for k in range(max(len(rebuilt), len(batch))):
                recorded = batch[k] if k < len(batch) else None
                made = rebuilt[k] if k < len(rebuilt) else None
                if made is not None:
                    made = made.model_copy(update={"prev_hash": heads.get(made.pool, "")})
                index = group[k] if k < len(group) else group[-1] + 1
                if recorded is None:
                    diverged(index, None, made, "replay made a decision that was not recorded")
                elif made is None:
                    diverged(index, recorded, None, "replay made no such decision")
                elif dumps(made) == dumps(recorded):
                    results[recorded.pool].identical += 1
                else:
                    diverged(index, recorded, made, "rebuilt decision differs")
                if recorded is not None:
                    heads[recorded.pool] = decision_hash(recorded)
        restarts = _restarts(batch, state)
        for decision in batch:
            _fold(state, decision)
        for decision in batch:
            outcome = outcome_of(decision)
            if outcome is not None:
                _fold(state, outcome)
                if isinstance(outcome, PodEvicted) and decision.uid in restarts:
                    _fold(state, restarts[decision.uid][0])
        for _, nomination in restarts.values():
            _fold(state, nomination)
    for result in results.values():
        result.state = state
    if results:
        first = min(results)
        results[first].events = len(events)
    report.pools = dict(sorted(results.items()))
    return report
