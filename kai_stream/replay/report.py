"""Rich renderings of a replay summary and of a what-if comparison (the CLI prints these)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table

from kai_stream.analytics.render import moment
from kai_stream.replay.diff import render_divergence
from kai_stream.replay.runner import ReplayReport
from kai_stream.replay.whatif import PodOutcome, QueueMetrics, WhatIfReport

__all__ = ["render_replay", "render_whatif"]


def render_replay(report: ReplayReport) -> RenderableType:
    table = Table(title=f"replay of {report.source}")
    for column in ("pool", "events", "decisions", "identical", "divergent", "cycles run"):
        table.add_column(column, justify="right" if column != "pool" else "left")
    for name, pool in sorted(report.pools.items()):
        counts = (pool.events, pool.decisions, pool.identical, len(pool.divergences), pool.cycles)
        table.add_row(name, *map(str, counts))
    table.add_row(
        "[bold]total",
        str(report.events),
        str(report.decisions),
        str(report.identical),
        str(len(report.divergences)),
        str(sum(p.cycles for p in report.pools.values())),
    )
    parts: list[RenderableType] = [table]
    if report.malformed:
        parts.append(f"[yellow]{report.malformed} malformed record(s) skipped[/]")
    for error in report.errors:
        parts.append(f"[red]error:[/] {error}")
    first = report.first_divergence
    if first is not None:
        parts.append(render_divergence(first))
    elif report.decisions:
        parts.append(f"[bold green]identical[/]: all {report.decisions} decisions rebuilt byte for byte")
    return Group(*parts)


def _delta(before: float, after: float, unit: str = "s", lower_is_better: bool = True) -> str:
    diff = after - before
    if abs(diff) < 1e-9:
        return "="
    better = (diff < 0) == lower_is_better
    colour = "green" if better else "red"
    return f"[{colour}]{diff:+.1f}{unit}[/]"


def _side(outcome: PodOutcome | None) -> str:
    if outcome is None:
        return "(absent)"
    at = f" at {moment(outcome.bound_at)}" if outcome.bound_at is not None else ""
    return f"{outcome.status} {outcome.node or ''}{at}"


def render_whatif(report: WhatIfReport, *, max_pods: int = 20) -> RenderableType:
    parts: list[RenderableType] = [
        f"what-if over {report.source}: baseline config {report.baseline_config[:12]} (recorded) vs "
        f"{report.whatif_config[:12]}"
        + (f", queues overridden: {', '.join(report.queue_overrides)}" if report.queue_overrides else ""),
    ]
    for name, pool in sorted(report.pools.items()):
        table = Table(title=f"pool {name}: per queue, baseline | what-if", show_lines=True)
        for column in ("queue", "pods", "mean wait", "p50 wait", "max wait", "GPU·h", "evicted", "pending at end"):
            table.add_column(column, justify="left" if column == "queue" else "right", overflow="fold")
        empty = QueueMetrics(0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0)
        for queue in sorted(set(pool.baseline_queues) | set(pool.whatif_queues)):
            b = pool.baseline_queues.get(queue, empty)
            w = pool.whatif_queues.get(queue, empty)
            table.add_row(
                queue,
                f"{b.pods} | {w.pods}",
                f"{b.mean_wait_s:.1f} | {w.mean_wait_s:.1f}  {_delta(b.mean_wait_s, w.mean_wait_s)}",
                f"{b.p50_wait_s:.1f} | {w.p50_wait_s:.1f}  {_delta(b.p50_wait_s, w.p50_wait_s)}",
                f"{b.max_wait_s:.1f} | {w.max_wait_s:.1f}  {_delta(b.max_wait_s, w.max_wait_s)}",
                f"{b.gpu_hours:.2f} | {w.gpu_hours:.2f}",
                f"{b.evictions} | {w.evictions}  {_delta(b.evictions, w.evictions, '')}",
                f"{b.pending} | {w.pending}",
            )
        parts.append(table)
        changed = pool.changed_pods()
        pods = Table(title=f"pool {name}: {len(changed)} pod(s) with a different outcome (largest wait change first)")
        for column in ("pod", "queue", "baseline", "what-if", "wait change"):
            pods.add_column(column, overflow="fold")
        for before, after in changed[:max_pods]:
            delta = "" if after is None else _delta(before.wait(pool.end), after.wait(pool.end))
            pods.add_row(before.key, before.queue, _side(before), _side(after), delta)
        parts.append(pods)
    return Group(*parts)
