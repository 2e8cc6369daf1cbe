"""Runs a KAI ``TestTopologyBasic`` literal (ported as JSON under ``data/``) against our core.

The literal's Go constants are resolved here (``resolve``); ``tests/kai_builders.py`` turns it into observed events
with KAI's test defaults, as for the action tests.

``unit`` runs allocate alone once (KAI's ``allocateAction.Execute(ssn)``); ``integration`` runs the five
actions in rounds where evicted and pipelined pods come back pending and bound pods run
(``integration_tests_utils.runSchedulerOneRound``), 2 rounds then 5 more that must keep the expectation.
Status names are KAI's: Running, Binding (bound in this session), Pipelined, Releasing, Pending.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kai_stream.core.config import DEFAULT_ACTIONS, SchedulerConfig, parse_config
from kai_stream.core.events import AnyEvent, BindRequested, Decision, EvictionRequested, PodObserved, PodPipelined
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply
from tests import kai_builders as builders

DATA = Path(__file__).parent / "data"
T0 = 1_767_225_600.0
PRIORITIES = {
    "constants.PriorityTrainNumber": 50,
    "constants.PriorityInteractivePreemptibleNumber": 75,
    "constants.PriorityBuildNumber": 100,
    "constants.PriorityInferenceNumber": 125,
}


def load(source: str) -> list[dict[str, Any]]:
    """The literals of one KAI test file, in file order (``data/<file>.json``)."""
    cases: list[dict[str, Any]] = json.loads((DATA / f"{source}.json").read_text())
    return cases


def case(source: str, name: str) -> dict[str, Any]:
    found = [c for c in load(source) if c["Name"] == name]
    assert len(found) == 1, f"{source}: {len(found)} cases named {name!r}"
    return found[0]


def _expr(value: Any) -> Any:
    if isinstance(value, dict) and "$expr" in value:
        text = value["$expr"]
        if text in PRIORITIES:
            return PRIORITIES[text]
        if m := re.fullmatch(r"(\d+) \* 10e6", text):
            return int(m.group(1)) * 10**7
        if m := re.fullmatch(
            r"(?:ptr\.To \( int64 \(|test_utils\.CreateFloat64Pointer \(|pointer\.Int \() ([\d.]+)(?: \))+", text
        ):
            return float(m.group(1))
        if m := re.fullmatch(r"test_utils\.CreateFloat64Pointer \( (\d+) \* (\d+) \)", text):
            return float(int(m.group(1)) * int(m.group(2)))
        if text == "pointer.Int ( commonconstants.DefaultQueuePriority + 1 )":
            return 101
        if text.startswith("node_info.MigStrategy"):
            return text.removeprefix("node_info.MigStrategy").lower()
        if text.startswith("pod_status."):
            return text.removeprefix("pod_status.")
        if text.startswith("constants.") and text.endswith("Strategy"):
            return {"constants.SpreadStrategy": "spread", "constants.BinpackStrategy": "binpack"}[text]
        raise ValueError(f"unsupported literal {text!r}")
    return value


def _get(obj: dict[str, Any], key: str, default: Any = None) -> Any:
    return _expr(obj[key]) if key in obj and obj[key] is not None else default


def resolve(value: Any) -> Any:
    """The literal with its Go constants resolved (``RootSubGroupSet`` is left to the builder, ``null``, the
    conversion's key for an unkeyed Go value, is read by nothing)."""
    if isinstance(value, dict) and "$expr" not in value:
        return {k: v if k in ("RootSubGroupSet", "null") else resolve(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v) for v in value]
    return _expr(value)


def events(topology: dict[str, Any]) -> list[AnyEvent]:
    """The literal as observed events; what the builder models but these tests do not is refused."""
    for job in topology.get("Jobs") or []:
        if _get(job, "RequiredGpuMemory"):
            raise ValueError("gpu-memory requests are ported separately")
        for task in job.get("Tasks") or []:
            if _get(task, "State", "Pending") not in ("Pending", "Running", "Releasing", "Bound", "Allocated"):
                raise ValueError(f"task state {_get(task, 'State')} is not modelled")
    read = ("Nodes", "Departments", "Queues", "Jobs")
    objects: dict[str, Any] = {k: resolve(v) for k, v in topology.items() if k in read}
    return builders.events({**topology, **objects}, T0)


def config_of(topology: dict[str, Any], actions: tuple[str, ...]) -> SchedulerConfig:
    raw: dict[str, Any] = {"actions": list(actions)}
    conf = ((topology.get("Mocks") or {}).get("SchedulerConf")) or {}
    device: str | None = None
    for tier in conf.get("Tiers") or []:
        for plugin in tier.get("Plugins") or []:
            if plugin.get("Name") in ("gpuspread", "gpupack"):
                device = "spread" if plugin["Name"] == "gpuspread" else "binpack"
            args = plugin.get("Arguments") or {}
            placement = {}
            for key, resource in (("constants.GPUResource", "gpu"), ("constants.CPUResource", "cpu")):
                if key in args:
                    placement[resource] = _expr(args[key])
            if placement:
                raw["placement"] = placement
    if device is not None:
        node = raw.get("placement", {}).get("gpu")
        if node is not None and node != device:
            raise ValueError("different node-level and GPU-level strategies are not modelled (one placement.gpu)")
        raw["placement"] = {**raw.get("placement", {}), "gpu": device}
    return parse_config(raw)


def fold(evts: list[AnyEvent]) -> ClusterState:
    state = ClusterState()
    for event in evts:
        apply(state, event, state.offset + 1)
    return state


def run_unit(topology: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Allocate alone, one session: each pod's KAI status and node afterwards."""
    state = fold(events(topology))
    config = config_of(topology, ("allocate",))
    made = run_cycle(state, config, pool="default", input_offset=state.offset)
    return _statuses(state, made)


def _statuses(state: ClusterState, made: list[Decision]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for pod in state.pods.values():
        status = "Releasing" if pod.terminating else ("Running" if pod.node_name else "Pending")
        out[pod.uid] = {
            "status": status,
            "node": pod.node_name,
            "gpus": pod.requests.gpu_milli / 1000,
            "gpu_indices": pod.gpu_indices,
        }
    for d in made:
        entry = out[d.uid]
        if isinstance(d, BindRequested):
            entry.update(status="Binding", node=d.node, gpu_indices=d.gpu_indices)
        elif isinstance(d, PodPipelined):
            entry.update(status="Pipelined", node=d.node, gpu_indices=d.gpu_indices)
        elif isinstance(d, EvictionRequested):
            entry.update(status="Releasing")
    return out


def run_integration(
    topology: dict[str, Any], rounds_until: int = 2, rounds_after: int = 5
) -> list[dict[str, dict[str, Any]]]:
    """KAI's integration rounds; returns the statuses seen after round ``rounds_until`` and each later one."""
    config = config_of(topology, DEFAULT_ACTIONS)
    base = events(topology)
    pods = {e.pod.uid: e.pod for e in base if isinstance(e, PodObserved)}
    others = [e for e in base if not isinstance(e, PodObserved)]
    seen: list[dict[str, dict[str, Any]]] = []
    for number in range(1, rounds_until + rounds_after + 1):
        state = fold([*others, *(PodObserved(event_id=f"pod-{u}-{number}", ts=T0, pod=p) for u, p in pods.items())])
        made = run_cycle(state, config, pool="default", input_offset=state.offset)
        statuses = _statuses(state, made)
        for uid, entry in statuses.items():
            pod = pods[uid]
            if entry["status"] in ("Releasing", "Pipelined", "Pending"):
                pods[uid] = pod.model_copy(
                    update={
                        "node_name": None,
                        "gpu_indices": None,
                        "phase": "Pending",
                        "started": None,
                        "terminating": False,
                    }
                )
            elif entry["status"] == "Binding":
                pods[uid] = pod.model_copy(
                    update={
                        "node_name": entry["node"],
                        "gpu_indices": entry["gpu_indices"],
                        "phase": "Running",
                        "started": T0,
                    }
                )
                entry["status"] = "Running"
        if number >= rounds_until:
            seen.append(statuses)
    return seen


def mismatches(topology: dict[str, Any], statuses: dict[str, dict[str, Any]]) -> list[str]:
    """KAI's ``MatchExpectedAndRealTasks``: status, node, summed GPU request, consistent GPU groups."""
    problems: list[str] = []
    groups: dict[tuple[str, str], tuple[int, ...] | None] = {}

    def check(label: str, uids: list[str], want: dict[str, Any]) -> None:
        status = _get(want, "Status")
        node = want.get("NodeName") or None
        total = 0.0
        for uid in uids:
            got = statuses[uid]
            total += got["gpus"]
            if got["status"] != status:
                problems.append(f"{uid}: status {got['status']}, expected {status}")
            if node and got["node"] != node:
                problems.append(f"{uid}: node {got['node']}, expected {node}")
            if (
                want.get("GPUGroups")
                and not want.get("DontValidateGPUGroup")
                and got["status"] in ("Running", "Binding", "Pipelined")
            ):
                for expected in want["GPUGroups"]:
                    key = (str(got["node"]), str(expected))
                    if key in groups and groups[key] != got["gpu_indices"]:
                        problems.append(f"{uid}: GPU {got['gpu_indices']} but group {expected} is on {groups[key]}")
                    groups.setdefault(key, got["gpu_indices"])
        if abs(total - float(_get(want, "GPUsRequired", 0))) > 1e-9:
            problems.append(f"{label}: GPUs required {total}, expected {_get(want, 'GPUsRequired', 0)}")

    for job, want in (topology.get("JobExpectedResults") or {}).items():
        uids = sorted(u for u in statuses if u.rsplit("-", 1)[0] == job)
        if not uids:
            problems.append(f"job {job}: no tasks")
        check(job, uids, want)
    for task, want in (topology.get("TaskExpectedResults") or {}).items():
        check(task, [task], want)
    return problems
