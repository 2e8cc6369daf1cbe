"""Same decisions? Each example scenario is applied to an empty fixture (etcd + kube-apiserver + KWOK) for
kai-stream and for KAI Scheduler in turn; once the cluster is settled, which pods are bound, pending or evicted
(per queue, and on which node) is compared: ``python benchmarks/peer_kai/agree.py``; ``--ported reclaim`` adds
the ported KAI tests of that name that the API server can express (``ported.py``).

Settled: the outcome differs from the scenario's own starting point, no pod is being deleted, and nothing
changed for ``--quiet`` seconds (or ``--max-wait`` passed). Pods keep the scenario's order of creation; a
container without an image gets ``busybox`` (the API server requires one; the simulated cluster does not), and a
node gets the kubelet's ``kubernetes.io/hostname`` label, its default ``pods: 110`` and, without
``status.capacity``, its allocatable as capacity (a kubelet reports both; KAI counts GPUs from the capacity and
refuses every pod on a node that allocates no pods).
Queues with neither parent nor children go under one unlimited parent (``--no-parent-queue`` keeps them as they
are: KAI then binds none of their pods).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.peer_kai import harness, ported
from benchmarks.peer_kai.kai import KaiScheduler, version
from benchmarks.peer_kai.kaistream import KaiStream
from benchmarks.peer_kai.outcomes import STATES, PodOutcome, differences, key, outcomes, per_queue
from kai_stream.connectors.simcluster import read_documents

KUBELET_MAX_PODS = "110"
HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_PARENT = "default-parent-queue"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
app = typer.Typer(add_completion=False)


def as_served(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a real cluster would hold: containers have an image; a node carries the kubelet's
    ``kubernetes.io/hostname`` label (KAI leaves a node without every label of a Topology out of it), allocates the
    kubelet's default 110 pods unless the scenario says otherwise, and its capacity (which a kubelet reports with
    its allocatable, and which KAI reads GPUs from) equals its allocatable where the scenario gives none."""
    result = []
    for obj in objs:
        if obj.get("kind") == "Pod":
            spec = dict(obj.get("spec") or {})
            spec["containers"] = [{"image": "busybox", **c} for c in spec.get("containers") or []]
            obj = {**obj, "spec": spec}
        elif obj.get("kind") == "Node":
            meta = obj.get("metadata") or {}
            labels = {HOSTNAME_LABEL: meta.get("name"), **(meta.get("labels") or {})}
            obj = {**obj, "metadata": {**meta, "labels": labels}}
            if (obj.get("status") or {}).get("allocatable"):
                allocatable = {"pods": KUBELET_MAX_PODS, **obj["status"]["allocatable"]}
                capacity = obj["status"].get("capacity") or allocatable
                obj = {**obj, "status": {**obj["status"], "allocatable": allocatable, "capacity": capacity}}
        result.append(obj)
    return result


def under_parent(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every queue with neither parent nor children moved under one unlimited parent (KAI's chart names it
    ``default-parent-queue``): KAI schedules only jobs of queues whose parent exists (v0.12.0,
    ``job_order_by_queue.go``: "Queue's department doesn't exist"), so a one-level scenario binds nothing on KAI."""
    queues = [o for o in objs if o.get("kind") == "Queue"]
    parents = {str((q.get("spec") or {}).get("parentQueue")) for q in queues}
    lone = {q["metadata"]["name"] for q in queues
            if not (q.get("spec") or {}).get("parentQueue") and q["metadata"]["name"] not in parents}
    if not lone:
        return objs
    unlimited = {"quota": -1, "overQuotaWeight": 1, "limit": -1}
    root = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": DEFAULT_PARENT},
            "spec": {"resources": {r: dict(unlimited) for r in ("gpu", "cpu", "memory")}}}
    result = [root]
    for obj in objs:
        if obj.get("kind") == "Queue" and obj["metadata"]["name"] in lone:
            obj = {**obj, "spec": {**(obj.get("spec") or {}), "parentQueue": DEFAULT_PARENT}}
        result.append(obj)
    return result


def _signature(found: dict[str, PodOutcome]) -> tuple[tuple[str, str, str | None], ...]:
    return tuple(sorted((k, o.state, o.node) for k, o in found.items()))


async def settle(session: harness.Session, objs: list[dict[str, Any]], quiet_s: float,
                 max_s: float) -> dict[str, PodOutcome]:
    start = _signature(outcomes(objs, {key(p): p for p in objs if p.get("kind") == "Pod"}))
    began = changed_at = time.monotonic()
    last = start
    while True:
        session.check()
        items, _ = await session.api.items("/api/v1/pods")
        found = outcomes(objs, {key(p): p for p in items})
        terminating = any(p["metadata"].get("deletionTimestamp") for p in items)
        now = time.monotonic()
        signature = _signature(found)
        if signature != last:
            last, changed_at = signature, now
        if (signature != start and not terminating and now - changed_at >= quiet_s) or now - began > max_s:
            return found
        await asyncio.sleep(1.0)


async def _run(scenarios: list[tuple[str, list[dict[str, Any]]]], quiet_s: float, max_s: float, parent: bool,
               workdir: Path) -> dict[str, dict[str, dict[str, PodOutcome]]]:
    results: dict[str, dict[str, dict[str, PodOutcome]]] = {}
    console = Console(stderr=True)
    for name, documents in scenarios:
        objs = as_served(documents)
        if parent:
            objs = under_parent(objs)
        results[name] = {}
        where = workdir / name.replace(":", "-").replace("#", "-")
        for scheduler in (KaiStream(where / "kai-stream"), KaiScheduler(where / "kai")):
            began = time.monotonic()
            async with harness.started(scheduler, objs, where / scheduler.name / "plane",
                                       warmup_queue=None) as session:
                results[name][scheduler.name] = await settle(session, objs, quiet_s, max_s)
                await harness.dump(session, where / scheduler.name / "final")
            console.print(f"{name}: {scheduler.name} settled in {time.monotonic() - began:.0f} s")
    return results


def _counts(counter: Any) -> str:
    return " / ".join(str(counter.get(state, 0)) for state in STATES)


def agreement_table(results: dict[str, dict[str, dict[str, PodOutcome]]]) -> Table:
    out = Table(title="bound / pending / evicted per queue: kai-stream vs KAI Scheduler")
    for column in ("scenario", "queue", "kai-stream", "KAI Scheduler", "same"):
        out.add_column(column)
    for scenario, by_scheduler in results.items():
        ours, theirs = per_queue(by_scheduler["kai-stream"]), per_queue(by_scheduler["KAI Scheduler"])
        for queue in sorted(set(ours) | set(theirs)):
            a, b = ours.get(queue), theirs.get(queue)
            same = a == b
            out.add_row(scenario, queue, _counts(a or {}), _counts(b or {}),
                        "[green]yes[/]" if same else "[red]no[/]")
    return out


def summary_table(results: dict[str, dict[str, dict[str, PodOutcome]]]) -> Table:
    out = Table(title="per pod")
    for column in ("scenario", "pods", "same state", "same node", "differences (kai-stream vs KAI)"):
        out.add_column(column)
    for scenario, by_scheduler in results.items():
        ours, theirs = by_scheduler["kai-stream"], by_scheduler["KAI Scheduler"]
        state_diffs = differences(ours, theirs)
        node_diffs = differences(ours, theirs, nodes=True)
        pods = len(set(ours) | set(theirs))
        out.add_row(scenario, str(pods), f"{pods - len(state_diffs)}/{pods}", f"{pods - len(node_diffs)}/{pods}",
                    "\n".join(d.describe() for d in node_diffs) or "-")
    return out


@app.command()
def main(
    scenario: Annotated[list[Path] | None, typer.Option(help="scenario YAML (repeatable; default examples/*.yaml)",
                                                       exists=True, dir_okay=False)] = None,
    quiet: Annotated[float, typer.Option(help="settled after this long without a change (s)")] = 8.0,
    max_wait: Annotated[float, typer.Option(help="give up settling after this long (s)")] = 150.0,
    parent_queue: Annotated[bool, typer.Option(help="put one-level queues under an unlimited parent (KAI needs "
                                                    "one)")] = True,
    ported_match: Annotated[str | None, typer.Option(
        "--ported", help="also the ported KAI tests (tests/kai_ported) whose id contains this ('' for all) and that "
                         "the API server can express")] = None,
    ported_limit: Annotated[int, typer.Option(help="at most this many ported tests, spread over the matches")] = 8,
    examples: Annotated[bool, typer.Option(help="the example scenarios (when no --scenario is given)")] = True,
    workdir: Annotated[Path | None, typer.Option(help="keep logs here (default: a temporary directory)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write every pod's outcome as JSON")] = None,
) -> None:
    """Apply each scenario for each scheduler and print where they agree."""
    paths = scenario or (sorted(EXAMPLES.glob("*.yaml")) if examples else [])
    scenarios = [(path.stem, read_documents(path)) for path in paths]
    if ported_match is not None:
        matches = ported.cases(ported_match)
        step = max(1, len(matches) // max(1, ported_limit))
        scenarios += [(name, ported.objects(case)) for name, case in matches[::step][:ported_limit]]
    console = Console()
    console.print(f"{len(scenarios)} scenarios; KAI Scheduler {version()}")
    with tempfile.TemporaryDirectory(prefix="peer-kai-agree-") as tmp:
        results = asyncio.run(_run(scenarios, quiet, max_wait, parent_queue, workdir or Path(tmp)))
    console.print(agreement_table(results))
    console.print(summary_table(results))
    if json_out is not None:
        json_out.write_text(json.dumps(
            {s: {n: {p: asdict(o) for p, o in found.items()} for n, found in by.items()} for s, by in results.items()},
            indent=2))


if __name__ == "__main__":
    app()
