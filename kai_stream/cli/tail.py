"""`kai-stream tail decisions`: follow the decisions topic, filtered on the client side."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from kai_stream.analytics.render import moment
from kai_stream.cli import app
from kai_stream.core.events import BindRequested, Decision, EvictionRequested, PodPending, PodPipelined, dumps
from kai_stream.history.reader import DEFAULT_HISTORY_DIR, History, default_history, read_history
from kai_stream.settings import KafkaSettings
from kai_stream.subscribe import DecisionFilter, Kind, subscribe
from kai_stream.topics import TopicNames

_KINDS: dict[str, Kind] = {"bind": "bind", "evict": "evict", "pending": "pending", "pipeline": "pipeline"}
tail_app = typer.Typer(no_args_is_help=True, help="Follow a topic")
app.add_typer(tail_app, name="tail")


def describe(decision: Decision) -> str:
    """One line per decision, for people."""
    head = f"{moment(decision.ts)} {decision.pool}/{decision.queue} {decision.namespace}/{decision.name}"
    match decision:
        case BindRequested(node=node, gpu_indices=gpus):
            return f"{head} [green]bind[/] -> {node} gpus={list(gpus)} ({decision.action})"
        case EvictionRequested(preemptor=preemptor, reason=reason):
            return f"{head} [red]evict[/] by {decision.action} for {preemptor or '-'}: {reason}"
        case PodPipelined(node=node):
            return f"{head} [cyan]pipeline[/] -> {node}"
        case PodPending(code=code, reason=reason):
            return f"{head} [yellow]pending[/] {code}: {reason}"
    return head


def _print_recorded(history: History, wanted: DecisionFilter, limit: int | None, as_json: bool) -> None:
    console = Console(highlight=False, soft_wrap=True)
    decisions = sorted((d for log in history.pools.values() for d in log.decisions), key=lambda d: (d.ts, d.pool))
    shown = [d for d in decisions if wanted.matches(d)][:limit]
    for decision in shown:
        if as_json:
            typer.echo(dumps(decision).decode())
        else:
            console.print(describe(decision))
    if not as_json:
        note = f"{len(shown)} decisions from {history.source} (--bootstrap-servers follows a broker)"
        Console(stderr=True, soft_wrap=True).print(note)


@tail_app.command("decisions")
def decisions(
    queue: Annotated[str | None, typer.Option(help="only this queue")] = None,
    namespace: Annotated[str | None, typer.Option(help="only this namespace")] = None,
    kind: Annotated[list[str] | None, typer.Option(help="bind | evict | pending | pipeline (repeatable)")] = None,
    pool: Annotated[str | None, typer.Option(help="only this node pool")] = None,
    from_beginning: Annotated[bool, typer.Option("--from-beginning", help="start at the oldest decision")] = False,
    group_id: Annotated[str | None, typer.Option(help="durable subscriber name (resumes where it stopped)")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="stop after this many decisions")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one canonical JSON decision per line")] = False,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka bootstrap servers (default: KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS)")
    ] = None,
    topic_prefix: Annotated[str, typer.Option(help="topic name prefix of the deployment")] = "",
    from_history: Annotated[
        Path | None,
        typer.Option("--from-history", help="print a recorded history's decisions (default without a broker: "
                     f"{DEFAULT_HISTORY_DIR})"),
    ] = None,
) -> None:
    """Print decisions as they are made (Ctrl-C to stop); without a broker, those of the recorded history."""
    bad = sorted(set(kind or ()) - set(_KINDS))
    if bad:
        raise typer.BadParameter(f"unknown kind(s) {bad}; choose from {sorted(_KINDS)}", param_hint="--kind")
    kinds = [_KINDS[k] for k in kind or ()]
    if from_history is None and bootstrap_servers is None:
        from_history = default_history()
    if from_history is not None:
        wanted = DecisionFilter(queue=queue, namespace=namespace, kinds=tuple(kinds), pool=pool)
        _print_recorded(read_history(from_history), wanted, limit, as_json)
        return
    settings = KafkaSettings.for_servers(bootstrap_servers)
    console = Console(highlight=False, soft_wrap=True)

    async def main() -> None:
        seen = 0
        stream = subscribe(
            settings,
            queue=queue,
            namespace=namespace,
            kind=kinds or None,
            pool=pool,
            from_beginning=from_beginning,
            group_id=group_id,
            names=TopicNames.with_prefix(topic_prefix),
        )
        try:
            async for decision in stream:
                if as_json:
                    typer.echo(dumps(decision).decode())
                else:
                    console.print(describe(decision))
                seen += 1
                if limit is not None and seen >= limit:
                    return
        finally:
            await stream.aclose()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())

