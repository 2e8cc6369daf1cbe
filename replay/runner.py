"""Replay: rebuild every recorded decision from the recorded events with the pure core, byte for byte.

Per pool: fold cluster-events in offset order; where recorded decisions have ``input_offset`` equal to the
offset just folded, run ``run_cycle`` with the config whose hash they carry, compare what it returns with
what was recorded (canonical bytes, ``prev_hash`` set to the hash of the recorded predecessor), then fold
the *recorded* decisions so one divergence does not cascade. A cycle that decided nothing changed nothing,
so cycles are run only where decisions were recorded. A pool's cycle may run more than once at one offset
(the loop continues while recorded decisions remain there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from kai_stream.core.config import SchedulerConfig, config_hash, parse_config
from kai_stream.core.events import Decision, decision_hash, dumps
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply
from kai_stream.history.reader import History, PoolLog
from replay.diff import Divergence

__all__ = ["PoolReplay", "ReplayReport", "recorded_configs", "replay_history", "replay_pool"]

Progress = Callable[[int], None]
_PROGRESS_EVERY = 4096


@dataclass
class PoolReplay:
    pool: str
    events: int = 0
    decisions: int = 0
    identical: int = 0
    cycles: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    state: ClusterState = field(default_factory=ClusterState)


@dataclass
class ReplayReport:
    pools: dict[str, PoolReplay] = field(default_factory=dict)
    source: str = ""
    malformed: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def events(self) -> int:
        return sum(p.events for p in self.pools.values())

    @property
    def decisions(self) -> int:
        return sum(p.decisions for p in self.pools.values())

    @property
    def identical(self) -> int:
        return sum(p.identical for p in self.pools.values())

    @property
    def divergences(self) -> list[Divergence]:
        return [d for p in self.pools.values() for d in p.divergences]

    @property
    def first_divergence(self) -> Divergence | None:
        found = self.divergences
        return min(found, key=lambda d: (d.offset if d.offset is not None else d.index, d.pool)) if found else None

    @property
    def ok(self) -> bool:
        return not self.divergences and not self.errors

    def summary(self) -> dict[str, object]:
        first = self.first_divergence
        return {
            "source": self.source,
            "events": self.events,
            "decisions": self.decisions,
            "identical": self.identical,
            "divergent": len(self.divergences),
            "malformed": self.malformed,
            "errors": self.errors,
            "pools": {
                name: {"events": p.events, "decisions": p.decisions, "identical": p.identical, "cycles": p.cycles}
                for name, p in sorted(self.pools.items())
            },
            "first_divergence": first.as_dict() if first is not None else None,
        }


def recorded_configs(
    log: PoolLog, extra: SchedulerConfig | None = None
) -> tuple[dict[str, SchedulerConfig], list[str]]:
    """Configs by hash from the pool's ``ConfigRecorded`` records (plus ``extra``); errors for bad ones."""
    configs: dict[str, SchedulerConfig] = {}
    errors: list[str] = []
    for record in log.configs:
        try:
            config = parse_config(orjson.loads(record.config), f"ConfigRecorded(pool={log.pool})")
        except (ValueError, orjson.JSONDecodeError) as exc:
            errors.append(str(exc))
            continue
        actual = config_hash(config)
        if actual != record.config_hash:
            errors.append(
                f"pool {log.pool}: recorded config hashes to {actual[:12]}, record says {record.config_hash[:12]}"
            )
            continue
        configs[actual] = config
    if extra is not None:
        configs.setdefault(config_hash(extra), extra)
    default = SchedulerConfig()
    configs.setdefault(config_hash(default), default)
    return configs, errors


class _PoolReplayer:
    def __init__(self, log: PoolLog, configs: dict[str, SchedulerConfig], progress: Progress | None) -> None:
        self.log = log
        self.configs = configs
        self.progress = progress
        self.result = PoolReplay(pool=log.pool, decisions=len(log.decisions))
        self.state = self.result.state
        self.next = 0
        self.head = ""

    def _offset_of(self, index: int) -> int | None:
        offsets = self.log.decision_offsets
        return offsets[index] if index < len(offsets) else None

    def _diverged(
        self, index: int, input_offset: int, recorded: Decision | None, rebuilt: Decision | None, why: str
    ) -> None:
        self.result.divergences.append(
            Divergence(self.log.pool, index, self._offset_of(index), input_offset, recorded, rebuilt, why)
        )

    def _fold_recorded(self, decision: Decision) -> None:
        apply(self.state, decision)
        self.head = decision_hash(decision)
        self.next += 1

    def _skip_orphans(self, before: int) -> None:
        decisions = self.log.decisions
        while self.next < len(decisions) and decisions[self.next].input_offset < before:
            orphan = decisions[self.next]
            self._diverged(
                self.next, orphan.input_offset, orphan, None, "no recorded event at its input_offset: cannot rebuild"
            )
            self._fold_recorded(orphan)

    def _cycles_at(self, offset: int) -> None:
        decisions = self.log.decisions
        while self.next < len(decisions) and decisions[self.next].input_offset == offset:
            first = decisions[self.next]
            config = self.configs.get(first.config_hash)
            if config is None:
                self._diverged(self.next, offset, first, None, f"config {first.config_hash[:12]} was not recorded")
                self._fold_recorded(first)
                continue
            rebuilt = run_cycle(
                self.state, config, pool=self.log.pool, input_offset=offset, code_version=first.code_version
            )
            self.result.cycles += 1
            if not rebuilt:
                while self.next < len(decisions) and decisions[self.next].input_offset == offset:
                    self._diverged(self.next, offset, decisions[self.next], None, "replay made no such decision")
                    self._fold_recorded(decisions[self.next])
                return
            for made in rebuilt:
                if self.next >= len(decisions) or decisions[self.next].input_offset != offset:
                    extra = made.model_copy(update={"prev_hash": self.head})
                    self._diverged(self.next, offset, None, extra, "replay made a decision that was not recorded")
                    continue
                recorded = decisions[self.next]
                candidate = made.model_copy(update={"prev_hash": self.head})
                if dumps(candidate) == dumps(recorded):
                    self.result.identical += 1
                else:
                    self._diverged(self.next, offset, recorded, candidate, "rebuilt decision differs")
                self._fold_recorded(recorded)

    def run(self) -> PoolReplay:
        log = self.log
        state = self.state
        self._cycles_at(-1)
        for i, (offset, event) in enumerate(zip(log.offsets, log.events, strict=True)):
            self._skip_orphans(offset)
            apply(state, event, offset)
            self._cycles_at(offset)
            if self.progress is not None and i % _PROGRESS_EVERY == _PROGRESS_EVERY - 1:
                self.progress(_PROGRESS_EVERY)
        self._skip_orphans(1 << 62)
        self.result.events = len(log.events)
        if self.progress is not None:
            self.progress(len(log.events) % _PROGRESS_EVERY)
        return self.result


def replay_pool(
    log: PoolLog, config: SchedulerConfig | None = None, *, progress: Progress | None = None
) -> tuple[PoolReplay, list[str]]:
    """Replay one pool's log; ``config`` is used for decisions whose config was not recorded."""
    configs, errors = recorded_configs(log, config)
    return _PoolReplayer(log, configs, progress).run(), errors


def replay_history(
    history: History, config: SchedulerConfig | None = None, *, progress: Progress | None = None
) -> ReplayReport:
    """Replay every pool of ``history`` and gather the report."""
    report = ReplayReport(source=history.source, malformed=history.malformed)
    for name, log in sorted(history.pools.items()):
        result, errors = replay_pool(log, config, progress=progress)
        report.pools[name] = result
        report.errors.extend(errors)
    return report
