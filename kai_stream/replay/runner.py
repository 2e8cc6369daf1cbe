"""Replay: rebuild every recorded decision from the recorded events with the pure core, byte for byte.

Per pool: fold cluster-events in offset order; where recorded decisions have ``input_offset`` equal to the
offset just folded, run ``run_cycle`` with the config whose hash they carry, compare what it returns with
what was recorded (canonical bytes, ``prev_hash`` set to the hash of the recorded predecessor), then fold
the *recorded* decisions so one divergence does not cascade. A cycle that decided nothing changed nothing,
so cycles are run only where decisions were recorded. A pool's cycle may run more than once at one offset
(the loop continues while recorded decisions remain there).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized

import orjson

from kai_stream.core.config import SchedulerConfig, config_hash, parse_config
from kai_stream.core.events import Decision, decision_hash, dumps
from kai_stream.core.gcpause import frozen_heap
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply
from kai_stream.history.columnar import TimeOnly
from kai_stream.history.reader import History, PoolLog
from kai_stream.replay.diff import Divergence

__all__ = ["PoolReplay", "ReplayReport", "recorded_configs", "replay_history", "replay_pool"]

Progress = Callable[[int], None]
_PROGRESS_EVERY = 4096
_BLOCK = 32
"""Forked workers rebuild runs of this many consecutive cycles in turn (the core keeps its snapshot warm
between consecutive cycles)."""


@dataclass
class PoolReplay:
    pool: str
    events: int = 0
    decisions: int = 0
    identical: int = 0
    cycles: int = 0
    cycle_s: float = 0.0
    cycle_cpu_s: float = 0.0
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
                name: {
                    "events": p.events,
                    "decisions": p.decisions,
                    "identical": p.identical,
                    "cycles": p.cycles,
                    "cycle_seconds": round(p.cycle_s, 3),
                }
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
    def __init__(
        self,
        log: PoolLog,
        configs: dict[str, SchedulerConfig],
        progress: Progress | None,
        share: tuple[int, int] = (0, 1),
    ) -> None:
        self.log = log
        self.share = share
        self.group = -1
        self.configs = configs
        self.progress = progress
        self.result = PoolReplay(pool=log.pool, decisions=len(log.decisions))
        self.state = self.result.state
        self.next = 0
        self.head = ""
        self.timed_next = 0

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
            if self.share[0] == 0:
                why = "no recorded event at its input_offset: cannot rebuild"
                self._diverged(self.next, orphan.input_offset, orphan, None, why)
            self._fold_recorded(orphan)

    def _cycles_at(self, offset: int) -> None:
        decisions = self.log.decisions
        self.group += 1
        worker, workers = self.share
        if (self.group // _BLOCK) % workers != worker:
            while self.next < len(decisions) and decisions[self.next].input_offset == offset:
                self._fold_recorded(decisions[self.next])
            return
        while self.next < len(decisions) and decisions[self.next].input_offset == offset:
            first = decisions[self.next]
            config = self.configs.get(first.config_hash)
            if config is None:
                self._diverged(self.next, offset, first, None, f"config {first.config_hash[:12]} was not recorded")
                self._fold_recorded(first)
                continue
            started, cpu_started = time.perf_counter(), time.process_time()
            rebuilt = run_cycle(
                self.state, config, pool=self.log.pool, input_offset=offset, code_version=first.code_version
            )
            self.result.cycle_cpu_s += time.process_time() - cpu_started
            self.result.cycle_s += time.perf_counter() - started
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

    def _fold_time(self, timed: TimeOnly | None, upto: int, cycle_at: int | None) -> None:
        """Fold the time-only events before offset ``upto`` (and the one at ``cycle_at``, a cycle's offset).

        Only ``state.offset`` and ``state.now`` can change, so folding the last of them that holds the largest
        time (and then the one a cycle runs at) leaves the state where folding each would.
        """
        if timed is None:
            return
        start = self.timed_next
        end = timed.search(upto, start)
        if end > start:
            peak = int(timed.peak[end - 1])
            if peak >= start:
                apply(self.state, timed.event(peak), int(timed.offsets[peak]))
        if cycle_at is not None and end < len(timed) and timed.offsets[end] == cycle_at:
            apply(self.state, timed.event(end), cycle_at)
            end += 1
        self.timed_next = end

    def run(self) -> PoolReplay:
        log = self.log
        state = self.state
        decisions = log.decisions
        count = len(decisions)
        offsets, events, timed = log.parts()
        progress = self.progress
        if count and decisions[0].input_offset == -1:
            self._cycles_at(-1)
        done = 0
        last = -1
        i = 0
        while True:
            next_event = offsets[i] if i < len(offsets) else None
            next_cycle = decisions[self.next].input_offset if self.next < count else None
            if next_event is None and next_cycle is None:
                break
            if next_cycle is not None and next_cycle <= last:
                self._skip_orphans(last + 1)
                continue
            if next_event is not None and (next_cycle is None or next_event <= next_cycle):
                self._fold_time(timed, next_event, None)
                apply(state, events[i], next_event)
                last = next_event
                i += 1
                if next_cycle == next_event:
                    self._cycles_at(next_event)
            else:
                assert next_cycle is not None
                at = timed.search(next_cycle, self.timed_next) if timed is not None else 0
                if timed is not None and at < len(timed) and timed.offsets[at] == next_cycle:
                    self._fold_time(timed, next_cycle, next_cycle)
                    last = next_cycle
                    self._cycles_at(next_cycle)
                else:
                    self._skip_orphans(next_cycle + 1)
            if progress is not None:
                reached = i + self.timed_next
                if reached - done >= _PROGRESS_EVERY:
                    progress(reached - done)
                    done = reached
        if timed is not None and len(timed):
            last_timed = int(timed.offsets[-1])
            self._fold_time(timed, last_timed, last_timed)
        self.result.events = log.event_count
        if progress is not None and log.event_count > done:
            progress(log.event_count - done)
        return self.result


_FORKED: tuple[PoolLog, dict[str, SchedulerConfig]] | None = None


def _worker(share: tuple[int, int], counter: Synchronized[int], conn: Connection) -> None:
    assert _FORKED is not None
    log, configs = _FORKED

    def tick(n: int) -> None:
        with counter.get_lock():
            counter.value += n

    result = _PoolReplayer(log, configs, tick, share).run()
    state = result.state if share[0] == 0 else None
    conn.send((result.identical, result.cycles, result.cycle_s, result.cycle_cpu_s, result.divergences, state))
    conn.close()


def _replay_forked(
    log: PoolLog, configs: dict[str, SchedulerConfig], workers: int, progress: Progress | None
) -> PoolReplay:
    """Every worker folds the whole (already decoded) log but rebuilds only every ``workers``-th run of
    ``_BLOCK`` cycles.

    Folding recorded decisions never depends on rebuilt ones, so the cycles are independent given the fold;
    the decoded log is shared with the forked workers copy-on-write.
    """
    global _FORKED
    context = multiprocessing.get_context("fork")
    counter: Synchronized[int] = context.Value("q", 0)
    _FORKED = (log, configs)
    pipes: list[Connection] = []
    processes = []
    try:
        for worker in range(workers):
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_worker, args=((worker, workers), counter, send), daemon=True)
            process.start()
            send.close()
            pipes.append(receive)
            processes.append(process)
        reported = 0
        results: dict[int, tuple[int, int, float, float, list[Divergence], ClusterState | None]] = {}
        while len(results) < workers:
            for worker, pipe in enumerate(pipes):
                if worker not in results and pipe.poll(0.05):
                    results[worker] = pipe.recv()
            if progress is not None:
                done = counter.value // workers
                if done > reported:
                    progress(done - reported)
                    reported = done
            for worker, process in enumerate(processes):
                if worker not in results and process.exitcode not in (None, 0) and not pipes[worker].poll():
                    raise RuntimeError(f"replay worker {worker} died (exit code {process.exitcode})")
        if progress is not None and log.event_count > reported:
            progress(log.event_count - reported)
    finally:
        _FORKED = None
        for process in processes:
            process.join(timeout=5)
    merged = PoolReplay(pool=log.pool, decisions=len(log.decisions), events=log.event_count)
    for worker in sorted(results):
        identical, cycles, cycle_s, cycle_cpu_s, divergences, state = results[worker]
        merged.identical += identical
        merged.cycles += cycles
        merged.cycle_s += cycle_s
        merged.cycle_cpu_s += cycle_cpu_s
        merged.divergences.extend(divergences)
        if state is not None:
            merged.state = state
    merged.divergences.sort(key=lambda d: (d.index, d.rebuilt is not None))
    return merged


def replay_pool(
    log: PoolLog, config: SchedulerConfig | None = None, *, progress: Progress | None = None, workers: int = 1
) -> tuple[PoolReplay, list[str]]:
    """Replay one pool's log; ``config`` is used for decisions whose config was not recorded.

    ``workers`` > 1 rebuilds cycles in that many forked processes (where fork exists and the pool has work).
    """
    configs, errors = recorded_configs(log, config)
    if workers > 1 and len(log.decisions) >= 2 * workers and "fork" in multiprocessing.get_all_start_methods():
        return _replay_forked(log, configs, workers, progress), errors
    return _PoolReplayer(log, configs, progress).run(), errors


def replay_history(
    history: History,
    config: SchedulerConfig | None = None,
    *,
    progress: Progress | None = None,
    workers: int = 1,
) -> ReplayReport:
    """Replay every pool of ``history`` and gather the report.

    The decoded history is frozen out of the garbage collector's scans while it replays (``frozen_heap``; thawed
    at the end): it lives as long as the replay, and the collection after each cycle rescanned all of it (what
    that cost: benchmarks/README.md)."""
    report = ReplayReport(source=history.source, malformed=history.malformed)
    with frozen_heap(collect=False):
        for name, log in sorted(history.pools.items()):
            result, errors = replay_pool(log, config, progress=progress, workers=workers)
            report.pools[name] = result
            report.errors.extend(errors)
    return report
