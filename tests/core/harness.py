"""Scenario harness for the core tests: YAML manifests (+ one ``kind: Expect`` document) -> checked outcome.

An ``Expect`` document may carry ``config`` (a SchedulerConfig mapping; ``actions`` defaults to allocate
alone here, since these scenarios pin down allocate's rules and pending reasons), ``cycles``, ``pods`` (per "ns/name":
any of status, node, gpu_indices, queue, and ``code`` = the code of the pod's last PodPending decision),
``queues`` (per name: fair_share / allocated sub-dicts, compared with a 1e-6 tolerance) and ``decisions``
(counts per decision type).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kai_stream.core.config import SchedulerConfig, parse_config
from kai_stream.core.manifests import load_scenario
from kai_stream.simulate import SimulationResult, simulate

SCENARIOS = Path(__file__).parent / "scenarios"


def split(text: str) -> tuple[str, dict[str, Any]]:
    """The manifests (as YAML text) and the Expect document of a scenario file."""
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    expect = [d for d in docs if d.get("kind") == "Expect"]
    rest = [d for d in docs if d.get("kind") != "Expect"]
    return yaml.safe_dump_all(rest, sort_keys=False), (expect[0] if expect else {})


def run(text: str, config: SchedulerConfig | None = None, cycles: int = 20) -> SimulationResult:
    manifests, expect = split(text)
    if config is None:
        config = parse_config({"actions": ["allocate"], **(expect.get("config") or {})})
    events = load_scenario(manifests, scheduler_name=config.scheduler_name, default_queue=config.default_queue)
    return simulate(events, config, cycles=int(expect.get("cycles", cycles)))


def last_pending_code(result: dict[str, Any], key: str) -> str | None:
    code = None
    for d in result["decisions"]:
        if d["type"] == "PodPending" and f"{d['namespace']}/{d['name']}" == key:
            code = d["code"]
    return code


def check(text: str) -> dict[str, Any]:
    """Run a scenario and assert its Expect document; returns the result JSON for further checks."""
    _, expect = split(text)
    result = run(text).to_json()
    problems: list[str] = []
    for key, want in (expect.get("pods") or {}).items():
        got = result["pods"].get(key)
        if got is None:
            problems.append(f"pod {key}: missing from result")
            continue
        for field, value in want.items():
            actual = last_pending_code(result, key) if field == "code" else got.get(field)
            if actual != value:
                problems.append(f"pod {key}.{field}: expected {value!r}, got {actual!r}")
    for name, want in (expect.get("queues") or {}).items():
        got = result["queues"].get(name)
        if got is None:
            problems.append(f"queue {name}: missing")
            continue
        for part, values in want.items():
            for resource, value in values.items():
                actual = got[part][resource]
                if abs(actual - float(value)) > 1e-6:
                    problems.append(f"queue {name}.{part}.{resource}: expected {value}, got {actual}")
    if "decisions" in expect:
        counts: dict[str, int] = {}
        for d in result["decisions"]:
            counts[d["type"]] = counts.get(d["type"], 0) + 1
        for kind, n in expect["decisions"].items():
            if counts.get(kind, 0) != n:
                problems.append(f"decisions {kind}: expected {n}, got {counts.get(kind, 0)}")
    assert not problems, "\n".join(problems)
    return result
