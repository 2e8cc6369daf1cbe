"""Runs a ported KAI action test (``cases/*.json``) on the project's scheduler, with KAI's test defaults.

The test's objects become events through ``tests/kai_builders.py`` (KAI's test builders and their defaults).

A *unit* case runs its action once on the session and compares statuses (``Releasing`` after an eviction,
``Pipelined`` after a nomination, ``Running`` after a bind; ``Binding`` after allocate's, as its tests say), and KAI's
cache mock limits: no more binds, evictions and pipelines than ``Mocks.CacheRequirements`` allows. An *integration*
case follows KAI's integration harness: rounds of all actions on a session rebuilt from the test's objects, where
after each round releasing pods come back pending (or stay releasing for ``DeleteJobInTest``), pipelined pods go back
to pending and bound pods run; after ``RoundsUntilMatch`` (2) rounds the objects must match, and after each of
``RoundsAfterMatch`` (5) more rounds the session must still match. KAI's test sessions leave the staleness grace
period at its zero value, so a gang below its minimum is evicted at once (``stale_gang_grace_s`` 0).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kai_stream.core.config import DEFAULT_ACTIONS, SchedulerConfig, parse_config
from kai_stream.core.events import BindRequested, Decision, EvictionRequested, PodPipelined
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply
from tests.kai_builders import events

CASES = Path(__file__).parent / "cases"
NOW = 1_000_000.0
ALL_ACTIONS = DEFAULT_ACTIONS


@dataclass(frozen=True)
class Case:
    file: str
    ordinal: int
    source: str
    function: str
    name: str
    kind: str
    action: str
    topology: dict[str, Any]
    rounds_until: int
    rounds_after: int

    @property
    def id(self) -> str:
        suffix = f" [{self.ordinal}]" if self.ordinal else ""
        return f"{self.file}::{self.name}{suffix}"


def load_cases() -> list[Case]:
    cases: list[Case] = []
    for path in sorted(CASES.glob("*.json")):
        doc = json.loads(path.read_text())
        seen: dict[str, int] = {}
        for c in doc["cases"]:
            seen[c["name"]] = seen.get(c["name"], -1) + 1
            cases.append(
                Case(
                    file=path.stem,
                    ordinal=seen[c["name"]],
                    source=doc["source"],
                    function=c["function"],
                    name=c["name"],
                    kind=c["kind"],
                    action=c["action"],
                    topology=c["topology"],
                    rounds_until=c.get("roundsuntilmatch") or 2,
                    rounds_after=c.get("roundsaftermatch") or 5,
                )
            )
    return cases


# ------------------------------------------------------------------------------------------------ objects

def fold(topology: dict[str, Any]) -> ClusterState:
    state = ClusterState()
    for event in events(topology, NOW):
        apply(state, event, state.offset + 1)
    return state


# ------------------------------------------------------------------------------------------------ running


@dataclass
class Outcome:
    status: dict[str, str]
    node: dict[str, str]
    gpus: dict[str, tuple[int, ...]]
    counts: dict[str, int]


def initial_outcome(topology: dict[str, Any]) -> Outcome:
    status: dict[str, str] = {}
    node: dict[str, str] = {}
    for job in topology.get("Jobs") or []:
        for i, task in enumerate(job.get("Tasks") or []):
            key = f"{job['Name']}-{i}"
            status[key] = task.get("State", "Pending")
            node[key] = task.get("NodeName", "") or ""
    return Outcome(status, node, {}, {"binds": 0, "evictions": 0, "pipelines": 0})


def one_session(topology: dict[str, Any], actions: tuple[str, ...]) -> tuple[Outcome, list[Decision]]:
    """Build the session from the test's objects, run ``actions`` once, and read the pods' statuses after it."""
    state = fold(topology)
    config = parse_config({"actions": list(actions), "stale_gang_grace_s": 0.0})
    decisions = run_cycle(state, config, pool="default", input_offset=state.offset, reuse=False)
    out = initial_outcome(topology)
    for pod in state.pods.values():
        if pod.node_name is not None and pod.gpu_indices:
            out.gpus[pod.name] = pod.gpu_indices
    for d in decisions:
        if isinstance(d, BindRequested):
            out.status[d.name], out.node[d.name], out.gpus[d.name] = "Binding", d.node, d.gpu_indices
            out.counts["binds"] += 1
        elif isinstance(d, EvictionRequested):
            out.status[d.name] = "Releasing"
            out.counts["evictions"] += 1
        elif isinstance(d, PodPipelined):
            out.status[d.name], out.node[d.name] = "Pipelined", d.node
            out.counts["pipelines"] += 1
    return out, decisions


def advance(topology: dict[str, Any], out: Outcome) -> None:
    """KAI's integration harness after a round: what the test objects become (a pod still on its node keeps its
    devices)."""
    for job in topology.get("Jobs") or []:
        for i, task in enumerate(job.get("Tasks") or []):
            key = f"{job['Name']}-{i}"
            status = out.status[key]
            if (status == "Releasing" and not job.get("DeleteJobInTest")) or status == "Pipelined":
                task["State"], task["NodeName"] = "Pending", ""
                task.pop("GPUGroups", None)
            elif status == "Binding":
                task["State"], task["NodeName"] = "Running", out.node[key]
                task["GPUGroups"] = [f"#{g}" for g in out.gpus.get(key, ())]
            else:
                task["State"] = status
                if key in out.gpus:
                    task["GPUGroups"] = [f"#{g}" for g in out.gpus[key]]


def mismatches(topology: dict[str, Any], out: Outcome, *, binding_is_running: bool) -> list[str]:
    problems: list[str] = []

    def status_of(key: str) -> str:
        s = out.status[key]
        return "Running" if binding_is_running and s == "Binding" else s

    for job_name, want in (topology.get("JobExpectedResults") or {}).items():
        job = next((j for j in topology.get("Jobs") or [] if j["Name"] == job_name), None)
        if job is None:
            problems.append(f"job {job_name}: not in the test")
            continue
        for i in range(len(job.get("Tasks") or [])):
            key = f"{job_name}-{i}"
            if status_of(key) != want.get("Status", "Pending"):
                problems.append(f"{key}: status {status_of(key)}, expected {want.get('Status')}")
            if want.get("NodeName") and out.node[key] != want["NodeName"]:
                problems.append(f"{key}: node {out.node[key]!r}, expected {want['NodeName']!r}")
    for key, want in (topology.get("TaskExpectedResults") or {}).items():
        if key not in out.status:
            continue
        if status_of(key) != want.get("Status", "Pending"):
            problems.append(f"{key}: status {status_of(key)}, expected {want.get('Status')}")
        if want.get("NodeName") and out.node[key] != want["NodeName"]:
            problems.append(f"{key}: node {out.node[key]!r}, expected {want['NodeName']!r}")
    return problems


def cache_limits(topology: dict[str, Any], out: Outcome) -> list[str]:
    mocks = (topology.get("Mocks") or {}).get("CacheRequirements") or {}
    limits = {
        "binds": mocks.get("NumberOfCacheBinds", 0),
        "evictions": mocks.get("NumberOfCacheEvictions", 0),
        "pipelines": mocks.get("NumberOfPipelineActions", 0),
    }
    return [f"{k}: {out.counts[k]} > KAI's limit {limits[k]}" for k in limits if out.counts[k] > limits[k]]


def run_case(case: Case) -> list[str]:
    """The differences between the project's decisions and the KAI test's expectations ([] when it passes)."""
    topology = copy.deepcopy(case.topology)
    if case.kind == "unit":
        out, _ = one_session(topology, (case.action,))
        binding_is_running = case.action != "allocate"
        return mismatches(topology, out, binding_is_running=binding_is_running) + cache_limits(topology, out)
    for _ in range(case.rounds_until):
        out, _ = one_session(topology, ALL_ACTIONS)
        advance(topology, out)
    problems = [
        f"after {case.rounds_until} rounds: {p}"
        for p in mismatches(topology, initial_outcome(topology), binding_is_running=False)
    ]
    for r in range(case.rounds_after):
        out, _ = one_session(topology, ALL_ACTIONS)
        advance(topology, out)
        problems += [
            f"round {case.rounds_until + r + 1}: {p}" for p in mismatches(topology, out, binding_is_running=False)
        ]
        if problems:
            break
    return problems


def default_config() -> SchedulerConfig:
    return SchedulerConfig()
