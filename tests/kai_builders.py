"""KAI's test builders (``pkg/scheduler/test_utils``) as the project's observed events: the one reading of a
``TestTopologyBasic`` literal shared by the ported-test harnesses (``kai_ported/kai_harness.py``,
``kai_ported_allocate/kai_topology.py``) and the peer benchmark's API objects (``benchmarks/peer_kai/ported.py``).

The literal's values are plain (Go constants already resolved) except ``RootSubGroupSet``, read here. KAI's
defaults, as learnt from its builders:

* nodes: 20,000 CPU cores and 20 GB memory unless ``CPUMillis`` / ``CPUMemory`` say otherwise (both read as
  quantities: cores and bytes), ``GPUs`` whole devices of 100 MiB memory (``GPUMemory``);
* pods: 1 CPU core and 1 GB memory unless ``RequiredCPUsPerTask`` / ``RequiredMemoryPerTask`` say otherwise;
  ``RequiredGPUsPerTask`` devices (a non-integer is a GPU fraction), ``RequiredGpuMemory`` MiB; pod ``<job>-<i>``;
  a task's ``Priority`` becomes the pod label ``kai.scheduler/task-priority``, as KAI's ``jobs_fake`` does;
* jobs: stably sorted by priority, highest first; the i-th of N is created N - i minutes before now (oldest
  first) unless ``JobAgeInMinutes``; priority below 100 is preemptible unless ``Preemptibility`` says otherwise;
  the gang is all of the job's tasks unless ``RootSubGroupSet`` names a minimum or pod sets;
* queues: GPU quota ``DeservedGPUs`` (0), over-quota weight ``GPUOverQuotaWeight`` (0), limit
  ``MaxAllowedGPUs`` (0 = none); CPU and memory quota -1 (``DeservedCPUs`` millicores / ``DeservedMemory`` MB),
  weight 1; the i-th queue created i minutes after now. Without ``Departments`` every queue goes under one
  department ``default`` with unlimited quota; a department's GPU weight is its ``DeservedGPUs``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kai_stream.core import events as ev

NODE_CPU_CORES = 20_000
"""A node's CPU unless ``CPUMillis`` says otherwise (read as cores)."""
NODE_MEMORY = 20 * 10**9
"""A node's memory in bytes unless ``CPUMemory`` says otherwise."""
NODE_GPU_MEMORY_MIB = 100
"""A node's GPU memory per device unless ``GPUMemory`` says otherwise."""
POD_CPU_CORES = 1
"""A task's CPU unless ``RequiredCPUsPerTask`` says otherwise."""
POD_MEMORY = 10**9
"""A task's memory in bytes unless ``RequiredMemoryPerTask`` says otherwise."""
DEFAULT_DEPARTMENT = "default"
"""The department every queue goes under when the test names none (unlimited quota)."""
MINUTE = 60.0
NAMESPACE = "test"
"""The namespace of a job that names none."""
PLACED = ("Running", "Releasing", "Bound", "Allocated", "Binding")
"""Task states of a pod on its node."""


def _quantity(value: float | None, scale: int) -> int:
    return -1 if value is None or value == -1 else round(value * scale)


def _queue_resources(entry: dict[str, Any], gpu_weight: float) -> ev.QueueResources:
    return ev.QueueResources(
        gpu=ev.QueueResource(
            quota=_quantity(entry.get("DeservedGPUs", 0), 1000),
            over_quota_weight=max(0, round(gpu_weight)),
            limit=_quantity(entry.get("MaxAllowedGPUs") or -1, 1000),
        ),
        cpu=ev.QueueResource(
            quota=_quantity(entry.get("DeservedCPUs"), 1), limit=_quantity(entry.get("MaxAllowedCPUs"), 1)
        ),
        memory=ev.QueueResource(
            quota=_quantity(entry.get("DeservedMemory"), 10**6),
            limit=_quantity(entry.get("MaxAllowedMemory"), 10**6),
        ),
    )


def queue_events(topology: dict[str, Any], now: float) -> list[ev.AnyEvent]:
    """The departments (first) and queues, created a minute apart from ``now``."""
    queues = [dict(q) for q in topology.get("Queues") or []]
    departments = [dict(d) for d in topology.get("Departments") or []]
    if not departments and not topology.get("DisableDefaultDepartment"):
        for q in queues:
            q["ParentQueue"] = DEFAULT_DEPARTMENT
        departments = [{"Name": DEFAULT_DEPARTMENT, "DeservedGPUs": -1, "MaxAllowedGPUs": -1, "default": True}]
    events: list[ev.AnyEvent] = []
    for i, d in enumerate(departments):
        weight = 1 if d.get("default") else d.get("DeservedGPUs", 0)
        limits = {k: d[k] for k in ("DeservedGPUs", "MaxAllowedGPUs", "MaxAllowedCPUs", "MaxAllowedMemory") if k in d}
        resources = _queue_resources(limits, weight)
        spec = ev.QueueSpec(name=d["Name"], uid=d["Name"], resources=resources, created=now + MINUTE * i)
        events.append(ev.QueueObserved(event_id=f"d-{d['Name']}", ts=now, queue=spec))
    for i, q in enumerate(queues):
        spec = ev.QueueSpec(
            name=q["Name"],
            uid=q["Name"],
            parent=q.get("ParentQueue") or None,
            priority=100 if q.get("Priority") is None else int(q["Priority"]),
            resources=_queue_resources(q, q.get("GPUOverQuotaWeight", 0)),
            created=now + MINUTE * i,
        )
        events.append(ev.QueueObserved(event_id=f"q-{q['Name']}", ts=now, queue=spec))
    return events


def node_events(topology: dict[str, Any], now: float) -> list[ev.AnyEvent]:
    events: list[ev.AnyEvent] = []
    for name in sorted(topology.get("Nodes") or {}):
        n = topology["Nodes"][name] or {}
        if n.get("MigStrategy"):
            raise ValueError("MIG nodes are not modelled")
        cores = n.get("CPUMillis") or NODE_CPU_CORES
        memory = n.get("CPUMemory") or NODE_MEMORY
        spec = ev.NodeSpec(
            name=name,
            uid=name,
            labels={str(k): str(v) for k, v in (n.get("Labels") or {}).items()},
            allocatable=ev.Resources(
                gpu_milli=int(n.get("GPUs", 0)) * 1000, cpu_milli=round(cores * 1000), memory=round(memory)
            ),
            gpu_memory_mib=n.get("GPUMemory") or NODE_GPU_MEMORY_MIB,
        )
        events.append(ev.NodeObserved(event_id=f"n-{name}", ts=now, node=spec))
    return events


def ordered_jobs(topology: dict[str, Any]) -> list[dict[str, Any]]:
    """The jobs as KAI's builder creates them: stably by priority, highest first."""
    return sorted(topology.get("Jobs") or [], key=lambda j: -j.get("Priority", 0))


NODE_TYPE_LABEL = "kai.scheduler/type"


def constraint(literal: dict[str, Any] | None) -> ev.TopologyConstraint | None:
    """KAI's ``TopologyConstraintInfo`` (None, or one naming no level: no constraint)."""
    if not literal or not (literal.get("RequiredLevel") or literal.get("PreferredLevel")):
        return None
    return ev.TopologyConstraint(
        topology=literal.get("Topology") or None,
        required_level=literal.get("RequiredLevel") or None,
        preferred_level=literal.get("PreferredLevel") or None,
    )


def sub_group_tree(tree: Any, parent: str | None) -> list[ev.SubGroupSpec]:
    """The subgroups below a KAI ``SubGroupSet`` as the porter reads it (``{"children": ...}``): its sub-sets and
    pod sets, depth first, each naming its parent (None: the root, the pod group itself)."""
    if not isinstance(tree, dict) or "children" not in tree:
        return []
    found: list[ev.SubGroupSpec] = []
    for child in tree["children"]:
        name = child.get("subgroup_set", child.get("pod_set"))
        member = int(child.get("min", 1)) if "pod_set" in child else 1
        found.append(
            ev.SubGroupSpec(
                name=name,
                min_member=max(1, member),
                parent=parent,
                topology_constraint=constraint(child.get("topology")),
            )
        )
        found.extend(sub_group_tree(child, name))
    return found


def node_affinity(names: list[str]) -> tuple[ev.NodeAffinityTerm, ...]:
    """KAI's ``NodeAffinityNames``: a required node affinity on label ``kai.scheduler/type`` (tasks_fake)."""
    if not names:
        return ()
    requirement = ev.NodeSelectorRequirement(key=NODE_TYPE_LABEL, operator="In", values=tuple(names))
    return (ev.NodeAffinityTerm(match_expressions=(requirement,)),)


def topology_events(topology: dict[str, Any], now: float) -> list[ev.AnyEvent]:
    """KAI's ``Topology`` objects: their level labels, widest first."""
    events: list[ev.AnyEvent] = []
    for t in topology.get("Topologies") or []:
        name = t["ObjectMeta"]["Name"]
        levels = tuple(level["NodeLabel"] for level in t["Spec"]["Levels"])
        spec = ev.TopologySpec(name=name, levels=levels)
        events.append(ev.TopologyObserved(event_id=f"t-{name}", ts=now, topology=spec))
    return events


def sub_groups(job: dict[str, Any]) -> list[tuple[str, int]] | None:
    """(name, minMember) of each pod set of the job's ``RootSubGroupSet`` (``default`` for a plain minimum), or
    None for all of its tasks."""
    root = job.get("RootSubGroupSet")
    if root is None:
        return None
    if isinstance(root, dict) and "__subgroup_min__" in root:
        return [("default", int(root["__subgroup_min__"]))]
    if isinstance(root, dict) and "children" in root:
        tree = sub_group_tree(root, None)
        parents = {s.parent for s in tree if s.parent}
        return [(s.name, s.min_member) for s in tree if s.name not in parents] or None
    text = root["$expr"] if isinstance(root, dict) and "$expr" in root else json.dumps(root)
    if m := re.fullmatch(r"jobs_fake\.DefaultSubGroup \( (\d+) \)", text):
        return [("default", int(m.group(1)))]
    found = re.findall(r'NewPodSet \( \\?"([\w-]+)\\?" , (\d+)', text)
    if not found:
        raise ValueError(f"unsupported RootSubGroupSet {text!r}")
    return [(n, int(k)) for n, k in found]


def sub_group_specs(root: Any, groups: list[tuple[str, int]] | None) -> tuple[ev.SubGroupSpec, ...]:
    """The PodGroup's ``spec.subGroups``: the porter's tree as it is, or the named pod sets of the other forms."""
    if isinstance(root, dict) and "children" in root:
        return tuple(sub_group_tree(root, None))
    return tuple(ev.SubGroupSpec(name=n, min_member=k) for n, k in groups or () if n != "default")


class _Gpus:
    """GPU indices of the running pods of each node: fixed ones (``#k`` kept from an earlier round, or a numeric
    group) first, then named groups and whole devices on the lowest free device. KAI's builder gives every
    fractional pod without a group a fresh device even past the node's count; here such a pod takes a free device,
    or else shares one with room left (the only physical reading of those literals)."""

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


def job_events(topology: dict[str, Any], now: float) -> list[ev.AnyEvent]:
    """Each job's PodGroup followed by its pods, in the order KAI's builder creates the jobs."""
    jobs = ordered_jobs(topology)
    sizes = {name: int((n or {}).get("GPUs", 0)) for name, n in (topology.get("Nodes") or {}).items()}
    gpus = _Gpus(jobs, sizes)
    events: list[ev.AnyEvent] = []
    for index, job in enumerate(jobs):
        if job.get("IsBestEffortJob"):
            raise ValueError("best-effort (no request) jobs are not modelled")
        age = job.get("JobAgeInMinutes") or len(jobs) - index
        created = now - MINUTE * age
        namespace = job.get("Namespace") or NAMESPACE
        priority = int(job.get("Priority", 0))
        preemptible = {"Preemptible": True, "NonPreemptible": False}.get(job.get("Preemptibility") or "")
        name = job["Name"]
        tasks = job.get("Tasks") or []
        groups = sub_groups(job)
        root = job.get("RootSubGroupSet")
        group = ev.PodGroupSpec(
            namespace=namespace,
            name=name,
            uid=name,
            queue=job.get("QueueName", ""),
            min_member=max(1, len(tasks) if groups is None else sum(k for _, k in groups)),
            priority=priority,
            preemptible=preemptible,
            created=created,
            sub_groups=sub_group_specs(job.get("RootSubGroupSet"), groups),
            topology_constraint=constraint(root.get("topology")) if isinstance(root, dict) else None,
        )
        events.append(ev.PodGroupObserved(event_id=f"g-{name}", ts=now, pod_group=group))
        per_task = float(job.get("RequiredGPUsPerTask", 0) or 0)
        gpu_memory = int(job.get("RequiredGpuMemory", 0) or 0)
        cpu = job.get("RequiredCPUsPerTask") or POD_CPU_CORES
        memory = job.get("RequiredMemoryPerTask") or POD_MEMORY
        for i, task in enumerate(tasks):
            whole = per_task if task.get("RequiredGPUs") is None else float(task["RequiredGPUs"])
            fraction = whole != int(whole)
            node = task.get("NodeName") or None
            placed = task.get("State", "Pending") in PLACED and node is not None
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
            labels = {} if task.get("Priority") is None else {"kai.scheduler/task-priority": str(int(task["Priority"]))}
            pod = ev.PodSpec(
                namespace=namespace,
                name=f"{name}-{i}",
                uid=f"{name}-{i}",
                queue=job.get("QueueName", ""),
                pod_group=name,
                sub_group=task.get("SubGroupName") or None,
                affinity=node_affinity(task.get("NodeAffinityNames") or []),
                requests=ev.Resources(
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
                phase="Running" if placed else "Pending",
                terminating=task.get("State") == "Releasing",
                created=created,
                started=created if placed else None,
                labels=labels,
            )
            events.append(ev.PodObserved(event_id=f"p-{name}-{i}", ts=now, pod=pod))
    return events


def events(topology: dict[str, Any], now: float) -> list[ev.AnyEvent]:
    """Queues, topologies, nodes, then jobs: the whole literal as observed events."""
    return (
        queue_events(topology, now)
        + topology_events(topology, now)
        + node_events(topology, now)
        + job_events(topology, now)
    )
