"""Run one trace under several policies and compare them (built-in names or config files).

Built-in policies: ``kai`` (default config: fair share with every action, reclaim included), ``no-reclaim``
(the same without reclaim), ``fifo`` (one queue for every job, allocate only: creation order with backfill),
``binpack`` and ``spread`` (kai with that GPU placement). Anything else is read as a config file and named
by its file stem.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from kai_stream.analytics.summary import Summary, summarize
from kai_stream.core.config import PlacementConfig, SchedulerConfig, load_config
from kai_stream.core.events import ObservedEvent, QueueObserved
from kai_stream.trace.clusters import auto_queue_events
from kai_stream.trace.loaders import Trace, TraceError
from kai_stream.trace.simulator import SimulationStats, simulate_trace

__all__ = ["BUILTIN_POLICIES", "Policy", "compare", "metrics", "resolve_policy", "setup_for"]

BUILTIN_POLICIES = ("kai", "no-reclaim", "fifo", "binpack", "spread")
FIFO_QUEUE = "fifo"


@dataclass(frozen=True)
class Policy:
    name: str
    config: SchedulerConfig
    single_queue: bool = False


def resolve_policy(spec: str) -> Policy:
    """A built-in policy name or a config file path."""
    base = SchedulerConfig()
    if spec == "kai":
        return Policy("kai", base)
    if spec == "no-reclaim":
        return Policy(
            "no-reclaim", base.model_copy(update={"actions": tuple(a for a in base.actions if a != "reclaim")})
        )
    if spec == "fifo":
        return Policy("fifo", base.model_copy(update={"actions": ("allocate",)}), single_queue=True)
    if spec in ("binpack", "spread"):
        return Policy(spec, base.model_copy(update={"placement": PlacementConfig(gpu=spec, cpu=spec)}))
    path = Path(spec)
    if not path.is_file():
        raise TraceError(f"policy {spec!r}: not a built-in ({', '.join(BUILTIN_POLICIES)}) nor a config file")
    return Policy(path.stem, load_config(path))


def setup_for(
    policy: Policy, trace: Trace, base: list[ObservedEvent], auto_queues: bool
) -> tuple[Trace, list[ObservedEvent]]:
    """The trace and cluster events a policy runs on (``fifo``: every job in one queue)."""
    if policy.single_queue:
        nodes: list[ObservedEvent] = [e for e in base if not isinstance(e, QueueObserved)]
        single = Trace(trace.jobs.with_columns(queue=pl.lit(FIFO_QUEUE)), trace.source, trace.format, list(trace.notes))
        return single, nodes + auto_queue_events(nodes, [FIFO_QUEUE])
    events = list(base)
    if auto_queues:
        events += auto_queue_events(events, trace.teams)
    return trace, events


def metrics(policy: str, stats: SimulationStats, summary: Summary) -> dict[str, Any]:
    """The compare row of one policy."""
    c = summary.cluster
    return {
        "policy": policy,
        "jobs_completed": c["jobs_completed"],
        "jct_avg_s": c["jct_s"]["avg"],
        "jct_p99_s": c["jct_s"]["p99"],
        "delay_p50_s": c["queueing_delay_s"]["p50"],
        "delay_p99_s": c["queueing_delay_s"]["p99"],
        "utilization": c["utilization"],
        "jain": c["jain_fairness"],
        "evictions": c["evictions"],
        "wall_s": stats.wall_s,
    }


def compare(
    trace: Trace,
    base: list[ObservedEvent],
    policies: list[str],
    *,
    auto_queues: bool,
    history_root: str | Path | None = None,
) -> list[dict[str, Any]]:
    """Simulate ``trace`` once per policy (history under ``history_root/<policy>``) and return the rows."""
    resolved = [resolve_policy(p) for p in policies]
    names = [p.name for p in resolved]
    if len(set(names)) != len(names):
        raise TraceError(f"--configs: policy names repeat: {names}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kai-compare-") as scratch:
        root = Path(history_root) if history_root is not None else Path(scratch)
        for policy in resolved:
            run_trace, events = setup_for(policy, trace, base, auto_queues)
            directory = root / policy.name
            stats = simulate_trace(run_trace, events, policy.config, directory)
            rows.append(metrics(policy.name, stats, summarize(directory)))
    return rows
