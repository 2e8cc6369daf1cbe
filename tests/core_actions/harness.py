"""Scenario runner for the eviction-action tests: YAML manifests + one ``kind: Expect`` document.

Expect keys: ``pods`` (per "ns/name": status, node, and ``code`` = the code of its last PodPending), ``queues``
(fair_share / allocated per resource, 1e-6 tolerance), ``evictions`` (EvictionRequested count per action; every
action not named must have none), ``same_node`` (groups of pods that must share a node), ``nodes_within``
(per pod, the nodes it may be on). ``run`` can append a ``Tick`` at an event time (stale gangs, min-runtime).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kai_stream.core.config import SchedulerConfig, parse_config
from kai_stream.core.events import DEFAULT_POOL, ObservedEvent, Tick, stable_id
from kai_stream.core.manifests import load_scenario
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.simulate import SimulationResult, pools_of, simulate

SCENARIOS = Path(__file__).parent / "scenarios"
MAX_CYCLES = 20


def split(text: str) -> tuple[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    expect = [d for d in docs if d.get("kind") == "Expect"]
    rest = [d for d in docs if d.get("kind") != "Expect"]
    return yaml.safe_dump_all(rest, sort_keys=False), (expect[0] if expect else {})


def events_of(text: str, config: SchedulerConfig, tick: float | None = None) -> list[ObservedEvent]:
    manifests, _ = split(text)
    events = load_scenario(manifests, scheduler_name=config.scheduler_name, default_queue=config.default_queue)
    if tick is not None:
        events.append(Tick(event_id=stable_id("tick", str(tick)), ts=tick, pool=DEFAULT_POOL))
    return events


def run(name: str, tick: float | None = None) -> tuple[SimulationResult, dict[str, Any]]:
    text = (SCENARIOS / name).read_text()
    _, expect = split(text)
    config = parse_config(expect.get("config") or {})
    result = simulate(events_of(text, config, tick), config, cycles=MAX_CYCLES)
    assert_stable(result)
    return result, expect


def assert_stable(result: SimulationResult, extra: int = 10) -> None:
    """The simulation reached a cycle that decided nothing, and ``extra`` more cycles decide nothing either."""
    assert result.cycles < MAX_CYCLES, f"no fixed point within {MAX_CYCLES} cycles"
    state = result.state
    for _ in range(extra):
        for pool in pools_of(state):
            made = run_cycle(state, result.config, pool=pool, input_offset=state.offset)
            assert made == [], [f"{d.type} {d.namespace}/{d.name} by {d.action}" for d in made]


def last_pending_code(decisions: list[dict[str, Any]], key: str) -> str | None:
    code = None
    for d in decisions:
        if d["type"] == "PodPending" and f"{d['namespace']}/{d['name']}" == key:
            code = d["code"]
    return code


def check(result: SimulationResult, expect: dict[str, Any]) -> dict[str, Any]:
    out = result.to_json()
    pods = out["pods"]
    problems: list[str] = []
    for key, want in (expect.get("pods") or {}).items():
        got = pods.get(key)
        if got is None:
            problems.append(f"pod {key}: missing")
            continue
        for field, value in want.items():
            actual = last_pending_code(out["decisions"], key) if field == "code" else got.get(field)
            if actual != value:
                problems.append(f"pod {key}.{field}: expected {value!r}, got {actual!r}")
    for name, want in (expect.get("queues") or {}).items():
        for part, values in want.items():
            for resource, value in values.items():
                actual = out["queues"][name][part][resource]
                if abs(actual - float(value)) > 1e-6:
                    problems.append(f"queue {name}.{part}.{resource}: expected {value}, got {actual}")
    if "evictions" in expect:
        counts: dict[str, int] = {}
        for d in out["decisions"]:
            if d["type"] == "EvictionRequested":
                counts[d["action"]] = counts.get(d["action"], 0) + 1
        if counts != dict(expect["evictions"] or {}):
            problems.append(f"evictions: expected {expect['evictions']}, got {counts}")
    for group in expect.get("same_node") or []:
        nodes = {pods[k]["node"] for k in group}
        if len(nodes) != 1:
            problems.append(f"{group} should share a node, got {nodes}")
    for key, allowed in (expect.get("nodes_within") or {}).items():
        if pods[key]["node"] not in allowed:
            problems.append(f"{key} on {pods[key]['node']}, expected one of {allowed}")
    assert not problems, "\n".join(problems)
    return out


def settle_with_restarts(events: list[ObservedEvent], config: SchedulerConfig, cycles: int = 30) -> int:
    """Fold ``events`` and run cycles where, as workload controllers do, every evicted pod comes back pending
    under the same name; returns the number of cycles until one decided nothing (``cycles`` + 1 if never)."""
    from kai_stream.core.state import ClusterState, apply
    from kai_stream.emulation import Policy, react

    restarts = Policy(recreate="restart", steps=False, running=False)
    state = ClusterState()
    for event in events:
        apply(state, event, state.offset + 1)
    for n in range(1, cycles + 1):
        made = [d for pool in pools_of(state) for d in run_cycle(state, config, pool=pool, input_offset=state.offset)]
        if not made:
            return n
        for decision in made:
            apply(state, decision, state.offset + 1)
        for decision in made:
            for caused in react(decision, state, restarts):
                apply(state, caused, state.offset + 1)
    return cycles + 1
