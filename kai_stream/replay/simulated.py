"""Replay of an in-process simulation (``kai_stream.simulate``): scenario events + the decisions it made.

The simulation's log is the one ``kai_stream.emulation.EmulatedCluster`` keeps (the contract in
``kai_stream/simulate.py``): the scenario's events, then per round its barrier Tick, every pool's decisions (pools
sorted, each pool's cycle at ``input_offset`` = the last offset of its cluster-events partition, decisions folded
without an offset), then every event those decisions cause (outcomes, the connector's observations, re-created
pods), and, where the simulation's clock jumped (a round that decided nothing while evicted pods were
terminating), that round's barrier and the removals. Replay rebuilds the same log around the recorded
decisions and checks each pool's cycle: its
``input_offset`` must be where the rebuilt log stands, and ``run_cycle`` must return the recorded decisions byte
for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ClusterEvent, Decision, ObservedEvent, decision_hash, dumps
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.emulation import DEFAULT_TERMINATION_GRACE_S, EmulatedCluster
from kai_stream.replay.diff import Divergence
from kai_stream.replay.runner import PoolReplay, ReplayReport

__all__ = ["replay_simulation"]


def _rounds(decisions: Sequence[Decision]) -> list[list[list[int]]]:
    """Decision indices per round, per pool cycle: a pool's cycle is a run of one pool at one input offset;
    a round's cycles come in increasing pool order, so a pool not after the previous one starts a round."""
    rounds: list[list[list[int]]] = []
    for i, decision in enumerate(decisions):
        last = decisions[rounds[-1][-1][0]] if rounds else None
        if last is not None and (last.pool, last.input_offset) == (decision.pool, decision.input_offset):
            rounds[-1][-1].append(i)
        elif last is not None and last.pool < decision.pool:
            rounds[-1].append([i])
        else:
            rounds.append([[i]])
    return rounds


def replay_simulation(
    events: Sequence[ObservedEvent],
    decisions: Sequence[Decision],
    config: SchedulerConfig,
    *,
    partitions: int | None = None,
    termination_grace: float = DEFAULT_TERMINATION_GRACE_S,
) -> ReplayReport:
    """Rebuild every decision of ``simulate(events, config)`` from ``events`` and compare bytes."""
    cluster = EmulatedCluster.of(events, partitions=partitions, termination_grace=termination_grace)
    state = cluster.state
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

    round_number = 0
    for round_ in _rounds(decisions):
        opening = decisions[round_[0][0]]
        while cluster.terminating and cluster.log.offset_of(opening.pool) + 1 != opening.input_offset:
            round_number += 1
            cluster.start_round(round_number)
            cluster.end_grace()
        round_number += 1
        cluster.start_round(round_number)
        reactions: list[ClusterEvent] = []
        for group in round_:
            batch = [decisions[i] for i in group]
            name, offset = batch[0].pool, batch[0].input_offset
            stands = cluster.log.offset_of(name)
            if offset != stands:
                for i in group:
                    diverged(i, decisions[i], None, f"the rebuilt log stands at offset {stands}, not {offset}")
            else:
                version = batch[0].code_version
                rebuilt = run_cycle(state, config, pool=name, input_offset=offset, code_version=version)
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
            for decision in batch:
                reactions.extend(cluster.decide(decision))
        for reaction in reactions:
            cluster.observe(reaction)
    for result in results.values():
        result.state = state
    if results:
        first = min(results)
        results[first].events = len(events)
    report.pools = dict(sorted(results.items()))
    return report
