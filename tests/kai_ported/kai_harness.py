"""Runs a ported KAI action test (``cases/*.json``) on the project's scheduler, with KAI's test defaults.

KAI's test builders (``pkg/scheduler/test_utils``), as learnt from them:

* nodes: 20,000 CPU cores and 20 GB memory unless ``CPUMillis`` / ``CPUMemory`` say otherwise (both read as
  quantities: cores and bytes), ``GPUs`` whole devices of 100 MiB memory (``GPUMemory``);
* pods: 1 CPU core and 1 GB memory unless ``RequiredCPUsPerTask`` / ``RequiredMemoryPerTask`` say otherwise;
  ``RequiredGPUsPerTask`` devices (a non-integer is a GPU fraction), ``RequiredGpuMemory`` MiB; pod ``<job>-<i>``;
* jobs: stably sorted by priority, highest first; the i-th of N is created N - i minutes before now (oldest
  first); priority below 100 is preemptible unless ``Preemptibility`` says otherwise; the gang is all of the
  job's tasks unless ``RootSubGroupSet`` names a minimum;
* queues: GPU quota ``DeservedGPUs`` (0), over-quota weight ``GPUOverQuotaWeight`` (0), limit
  ``MaxAllowedGPUs`` (0 = none); CPU and memory quota -1 (``DeservedCPUs`` millicores / ``DeservedMemory`` MB),
  weight 1; the i-th queue created i minutes after now. Without ``Departments`` every queue goes under one
  department ``default`` with unlimited quota; a department's GPU weight is its ``DeservedGPUs``.

A *unit* case runs its action once on the session and compares statuses (``Releasing`` after an eviction,
``Pipelined`` after a nomination, ``Running`` after a bind; ``Binding`` after allocate's, as its tests say), and
KAI's cache mock limits: no more binds, evictions and pipelines than ``Mocks.CacheRequirements`` allows. An
*integration* case follows KAI's integration harness: rounds of all actions on a session rebuilt from the test's
objects, where after each round releasing pods come back pending (or stay releasing for ``DeleteJobInTest``),
pipelined pods go back to pending and bound pods run; after ``RoundsUntilMatch`` (2) rounds the objects must match,
and after each of ``RoundsAfterMatch`` (5) more rounds the session must still match. KAI's test sessions leave the
staleness grace period at its zero value, so a gang below its minimum is evicted at once (``stale_gang_grace_s``
0).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kai_stream.core.config import DEFAULT_ACTIONS, SchedulerConfig, parse_config
from kai_stream.core.events import (
    AnyEvent,
    BindRequested,
    Decision,
    EvictionRequested,
    NodeAffinityTerm,
    NodeObserved,
    NodeSelectorRequirement,
    NodeSpec,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodPipelined,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
    SubGroupSpec,
    TopologyConstraint,
    TopologyObserved,
    TopologySpec,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply
from tests.kai_defaults import (
    DEFAULT_DEPARTMENT,
    NODE_CPU_CORES,
    NODE_GPU_MEMORY_MIB,
    NODE_MEMORY,
    POD_CPU_CORES,
    POD_MEMORY,
)

CASES = Path(__file__).parent / "cases"
NOW = 1_000_000.0
NAMESPACE = "test"
ALL_ACTIONS = DEFAULT_ACTIONS
NODE_TYPE_LABEL = "kai.scheduler/type"


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


def _queue_res(quota: float, weight: float, limit: float, scale: int) -> QueueResource:
    def amount(x: float) -> int:
        return -1 if x == -1 else round(x * scale)

    return QueueResource(quota=amount(quota), over_quota_weight=max(0, round(weight)), limit=amount(limit))


def queue_events(topology: dict[str, Any]) -> list[AnyEvent]:
    queues = [dict(q) for q in topology.get("Queues") or []]
    departments = [dict(d) for d in topology.get("Departments") or []]
    if not departments and not topology.get("DisableDefaultDepartment"):
        for q in queues:
            q["ParentQueue"] = DEFAULT_DEPARTMENT
        departments = [{"Name": DEFAULT_DEPARTMENT, "DeservedGPUs": -1, "MaxAllowedGPUs": -1, "default": True}]
    events: list[AnyEvent] = []
    for i, d in enumerate(departments):
        gpu_quota = d.get("DeservedGPUs", 0)
        weight = 1 if d.get("default") else gpu_quota
        res = QueueResources(
            gpu=_queue_res(gpu_quota, weight, d.get("MaxAllowedGPUs") or -1, 1000),
            cpu=_queue_res(-1, 1, -1 if d.get("MaxAllowedCPUs") is None else d["MaxAllowedCPUs"], 1),
            memory=_queue_res(-1, 1, -1 if d.get("MaxAllowedMemory") is None else d["MaxAllowedMemory"], 10**6),
        )
        spec = QueueSpec(name=d["Name"], uid=d["Name"], resources=res, created=NOW + 60 * i)
        events.append(QueueObserved(event_id=f"d-{d['Name']}", ts=0.0, queue=spec))
    for i, q in enumerate(queues):
        res = QueueResources(
            gpu=_queue_res(
                q.get("DeservedGPUs", 0), q.get("GPUOverQuotaWeight", 0), q.get("MaxAllowedGPUs") or -1, 1000
            ),
            cpu=_queue_res(
                -1 if q.get("DeservedCPUs") is None else q["DeservedCPUs"],
                1,
                -1 if q.get("MaxAllowedCPUs") is None else q["MaxAllowedCPUs"],
                1,
            ),
            memory=_queue_res(
                -1 if q.get("DeservedMemory") is None else q["DeservedMemory"],
                1,
                -1 if q.get("MaxAllowedMemory") is None else q["MaxAllowedMemory"],
                10**6,
            ),
        )
        spec = QueueSpec(
            name=q["Name"],
            uid=q["Name"],
            parent=q.get("ParentQueue") or None,
            priority=100 if q.get("Priority") is None else q["Priority"],
            resources=res,
            created=NOW + 60 * i,
        )
        events.append(QueueObserved(event_id=f"q-{q['Name']}", ts=0.0, queue=spec))
    return events


def node_events(topology: dict[str, Any]) -> list[AnyEvent]:
    events: list[AnyEvent] = []
    for name in sorted(topology.get("Nodes") or {}):
        n = topology["Nodes"][name] or {}
        cores = n.get("CPUMillis") or NODE_CPU_CORES
        memory = n.get("CPUMemory") or NODE_MEMORY
        labels = {str(k): str(v) for k, v in (n.get("Labels") or {}).items()}
        spec = NodeSpec(
            name=name,
            labels=labels,
            allocatable=Resources(
                gpu_milli=int(n.get("GPUs", 0)) * 1000, cpu_milli=round(cores * 1000), memory=round(memory)
            ),
            gpu_memory_mib=n.get("GPUMemory") or NODE_GPU_MEMORY_MIB,
        )
        events.append(NodeObserved(event_id=f"n-{name}", ts=0.0, node=spec))
    return events


def ordered_jobs(topology: dict[str, Any]) -> list[dict[str, Any]]:
    jobs = list(topology.get("Jobs") or [])
    return sorted(jobs, key=lambda j: -j.get("Priority", 0))


def _gang_min(job: dict[str, Any]) -> int:
    root = job.get("RootSubGroupSet")
    if isinstance(root, dict) and "__subgroup_min__" in root:
        return int(root["__subgroup_min__"])
    pod_sets = [s for s in _sub_groups(root, None) if not any(c.parent == s.name for c in _sub_groups(root, None))]
    if pod_sets:
        return sum(s.min_member for s in pod_sets)
    return len(job.get("Tasks") or [])


def _constraint(literal: dict[str, Any] | None) -> TopologyConstraint | None:
    """KAI's ``TopologyConstraintInfo`` (None, or one naming no level: no constraint)."""
    if not literal or not (literal.get("RequiredLevel") or literal.get("PreferredLevel")):
        return None
    return TopologyConstraint(
        topology=literal.get("Topology") or None,
        required_level=literal.get("RequiredLevel") or None,
        preferred_level=literal.get("PreferredLevel") or None,
    )


def _sub_groups(tree: Any, parent: str | None) -> list[SubGroupSpec]:
    """The subgroups below a KAI ``SubGroupSet`` (``goliteral``'s tree): its sub-sets and pod sets, depth first,
    each naming its parent (None: the root, the pod group itself)."""
    if not isinstance(tree, dict) or "children" not in tree:
        return []
    found: list[SubGroupSpec] = []
    for child in tree["children"]:
        name = child.get("subgroup_set", child.get("pod_set"))
        member = int(child.get("min", 1)) if "pod_set" in child else 1
        found.append(
            SubGroupSpec(
                name=name, min_member=max(1, member), parent=parent, topology_constraint=_constraint(child["topology"])
            )
        )
        found.extend(_sub_groups(child, name))
    return found


def _node_affinity(names: list[str]) -> tuple[NodeAffinityTerm, ...]:
    """KAI's ``NodeAffinityNames``: a required node affinity on label ``kai.scheduler/type`` (tasks_fake)."""
    if not names:
        return ()
    requirement = NodeSelectorRequirement(key=NODE_TYPE_LABEL, operator="In", values=tuple(names))
    return (NodeAffinityTerm(match_expressions=(requirement,)),)


def topology_events(topology: dict[str, Any]) -> list[AnyEvent]:
    """KAI's ``Topology`` objects: their level labels, widest first."""
    events: list[AnyEvent] = []
    for t in topology.get("Topologies") or []:
        name = t["ObjectMeta"]["Name"]
        levels = tuple(level["NodeLabel"] for level in t["Spec"]["Levels"])
        events.append(TopologyObserved(event_id=f"t-{name}", ts=0.0, topology=TopologySpec(name=name, levels=levels)))
    return events


class _Gpus:
    """GPU indices of the running pods of each node: fixed ones (``#k``, kept from an earlier round) first, then
    named groups and whole devices on the lowest free device. KAI's builder gives every fractional pod without a
    group a fresh device even past the node's count; here such a pod takes a free device, or else shares one with
    room left (the only physical reading of those literals)."""

    def __init__(self, jobs: list[dict[str, Any]], sizes: dict[str, int]) -> None:
        self.sizes = sizes
        self.used: dict[str, set[int]] = {}
        self.shared: dict[tuple[str, int], int] = {}
        self.groups: dict[tuple[str, str], int] = {}
        for job in jobs:
            for task in job.get("Tasks") or []:
                for g in task.get("GPUGroups") or []:
                    if isinstance(g, str) and g.startswith("#"):
                        self.used.setdefault(task.get("NodeName", ""), set()).add(int(g[1:]))
                        self.groups[(task.get("NodeName", ""), g)] = int(g[1:])

    def take(self, node: str) -> int:
        used = self.used.setdefault(node, set())
        i = 0
        while i in used:
            i += 1
        used.add(i)
        return i

    def fraction(self, node: str, milli: int) -> int:
        used = self.used.setdefault(node, set())
        free = [i for i in range(self.sizes.get(node, 0)) if i not in used]
        if free:
            used.add(free[0])
            self.shared[(node, free[0])] = milli
            return free[0]
        for (n, i), taken in sorted(self.shared.items()):
            if n == node and taken + milli <= 1000:
                self.shared[(n, i)] = taken + milli
                return i
        return self.take(node)

    def group(self, node: str, name: str) -> int:
        key = (node, name)
        if key not in self.groups:
            self.groups[key] = self.take(node)
        return self.groups[key]


def job_events(topology: dict[str, Any]) -> list[AnyEvent]:
    jobs = ordered_jobs(topology)
    sizes = {name: int((n or {}).get("GPUs", 0)) for name, n in (topology.get("Nodes") or {}).items()}
    gpus = _Gpus(jobs, sizes)
    events: list[AnyEvent] = []
    for index, job in enumerate(jobs):
        created = (
            NOW - 60 * (len(jobs) - index) if not job.get("JobAgeInMinutes") else NOW - 60 * job["JobAgeInMinutes"]
        )
        namespace = job.get("Namespace") or NAMESPACE
        priority = int(job.get("Priority", 0))
        preemptibility = job.get("Preemptibility") or ""
        preemptible = {"Preemptible": True, "NonPreemptible": False}.get(preemptibility)
        name = job["Name"]
        root = job.get("RootSubGroupSet")
        group = PodGroupSpec(
            namespace=namespace,
            name=name,
            uid=name,
            queue=job.get("QueueName", ""),
            min_member=max(1, _gang_min(job)),
            priority=priority,
            preemptible=preemptible,
            topology_constraint=_constraint(root.get("topology")) if isinstance(root, dict) else None,
            sub_groups=tuple(_sub_groups(root, None)),
            created=created,
        )
        events.append(PodGroupObserved(event_id=f"g-{name}", ts=0.0, pod_group=group))
        per_task = float(job.get("RequiredGPUsPerTask", 0) or 0)
        gpu_memory = int(job.get("RequiredGpuMemory", 0) or 0)
        cpu = job.get("RequiredCPUsPerTask") or POD_CPU_CORES
        memory = job.get("RequiredMemoryPerTask") or POD_MEMORY
        for i, task in enumerate(job.get("Tasks") or []):
            whole = per_task if task.get("RequiredGPUs") is None else float(task["RequiredGPUs"])
            fraction = whole != int(whole)
            state = task.get("State", "Pending")
            node = task.get("NodeName") or None
            placed = state in ("Running", "Releasing", "Bound", "Allocated", "Binding") and node is not None
            indices: tuple[int, ...] | None = None
            if placed and gpu_memory == 0:
                assert node is not None
                if fraction:
                    names = task.get("GPUGroups") or []
                    indices = (gpus.group(node, names[0]) if names else gpus.fraction(node, round(whole * 1000)),)
                elif whole > 0:
                    fixed = [int(g[1:]) for g in task.get("GPUGroups") or [] if str(g).startswith("#")]
                    indices = tuple(fixed) if fixed else tuple(gpus.take(node) for _ in range(int(whole)))
            elif placed and gpu_memory:
                assert node is not None
                names = task.get("GPUGroups") or []
                indices = (gpus.group(node, names[0]) if names else gpus.take(node),)
            pod = PodSpec(
                namespace=namespace,
                name=f"{name}-{i}",
                uid=f"{name}-{i}",
                queue=job.get("QueueName", ""),
                pod_group=name,
                requests=Resources(
                    gpu_milli=0 if gpu_memory else round(whole * 1000),
                    cpu_milli=round(cpu * 1000),
                    memory=round(memory),
                ),
                gpu_fraction_milli=round(whole * 1000) if fraction and not gpu_memory else None,
                gpu_memory_mib=gpu_memory or None,
                priority=priority,
                preemptible=preemptible,
                node_name=node if placed else None,
                gpu_indices=indices,
                sub_group=task.get("SubGroupName") or None,
                affinity=_node_affinity(task.get("NodeAffinityNames") or []),
                phase="Running" if placed else "Pending",
                terminating=state == "Releasing",
                created=created,
                started=created if placed else None,
            )
            events.append(PodObserved(event_id=f"p-{name}-{i}", ts=0.0, pod=pod))
    return events


def fold(topology: dict[str, Any]) -> ClusterState:
    state = ClusterState()
    for event in queue_events(topology) + topology_events(topology) + node_events(topology) + job_events(topology):
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
