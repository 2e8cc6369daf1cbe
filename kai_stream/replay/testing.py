"""``assert_replays_identically``: the check any test can run over a log it produced (or a history dir)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ALL_POOLS, ClusterEvent, ConfigRecorded, Decision, ObservedEvent
from kai_stream.history.reader import History, PoolLog, read_history
from kai_stream.replay.diff import Divergence
from kai_stream.replay.runner import ReplayReport, replay_history
from kai_stream.replay.simulated import replay_simulation

__all__ = [
    "ReplayMismatch",
    "assert_replays_identically",
    "assert_simulation_replays_identically",
    "history_from_lists",
]


class ReplayMismatch(AssertionError):
    def __init__(self, report: ReplayReport) -> None:
        self.report = report
        first: Divergence | None = report.first_divergence
        detail = first.headline() if first is not None else "; ".join(report.errors)
        fields = ", ".join(f"{f}: {a!r} != {b!r}" for f, a, b in (first.fields if first else [])[:6])
        super().__init__(
            f"replay diverged: {len(report.divergences)} of {report.decisions} decisions differ; first: {detail}"
            + (f" [{fields}]" if fields else "")
        )


def history_from_lists(
    events: Sequence[ClusterEvent],
    decisions: Sequence[Decision],
    configs: Sequence[ConfigRecorded] = (),
) -> History:
    """A history from in-memory lists: ``events`` in log order (offset = position), decisions in order."""
    pools: dict[str, PoolLog] = {}
    for decision in decisions:
        log = pools.setdefault(decision.pool, PoolLog(decision.pool))
        log.decisions.append(decision)
        log.decision_offsets.append(len(log.decision_offsets))
    for config in configs:
        pools.setdefault(config.pool, PoolLog(config.pool)).configs.append(config)
    for event in events:
        if event.pool != ALL_POOLS:
            pools.setdefault(event.pool, PoolLog(event.pool))
    for offset, event in enumerate(events):
        for name, log in pools.items():
            if event.pool in (name, ALL_POOLS):
                log.events.append(event)
                log.offsets.append(offset)
    return History(pools=dict(sorted(pools.items())), source="in-memory")


def assert_replays_identically(
    source: str | Path | History | tuple[Sequence[ClusterEvent], Sequence[Decision]],
    config: SchedulerConfig | None = None,
) -> ReplayReport:
    """Replay ``source`` (history dir, ``History`` or (events, decisions)) and fail on any divergence.

    ``config`` is used where the log recorded no ``ConfigRecorded`` for a decision's config hash.
    """
    if isinstance(source, str | Path):
        history = read_history(source)
    elif isinstance(source, History):
        history = source
    else:
        history = history_from_lists(*source)
    report = replay_history(history, config)
    if not report.ok:
        raise ReplayMismatch(report)
    if report.decisions == 0:
        raise AssertionError(f"nothing to replay in {history.source}: no decisions recorded")
    return report


def assert_simulation_replays_identically(
    events: Sequence[ObservedEvent], decisions: Sequence[Decision], config: SchedulerConfig
) -> ReplayReport:
    """Replay a ``kai_stream.simulate`` run (its scenario events and decisions) and fail on any divergence."""
    report = replay_simulation(events, decisions, config)
    if not report.ok:
        raise ReplayMismatch(report)
    return report
