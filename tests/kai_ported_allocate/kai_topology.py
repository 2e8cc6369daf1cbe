"""Runs a KAI ``TestTopologyBasic`` literal (ported as JSON under ``data/``) against our core.

The literal is turned into observed events with KAI's test defaults (``pkg/scheduler/test_utils``):

* node: 20000 CPU, 20G memory unless ``CPUMillis`` / ``CPUMemory``; a task: 1 CPU, 1G memory unless
  ``RequiredCPUsPerTask`` / ``RequiredMemoryPerTask`` (both sides in the same quantity unit, taken as cores);
* queue: GPU quota ``DeservedGPUs``, limit ``MaxAllowedGPUs`` (0 = none), over-quota weight
  ``GPUOverQuotaWeight`` (0 when unset); CPU and memory unlimited with weight 1; created one minute apart in
  list order; every queue's parent is the implicit department ``default`` (unlimited) unless the literal
  names departments or disables it;
* job: a gang of all its tasks (``DefaultSubGroup``) unless ``RootSubGroupSet``; jobs sorted by priority
  (stable), the first created earliest; priority below 100 is preemptible; task ``i`` is pod ``<job>-<i>``.

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
from kai_stream.core.events import (
    AnyEvent,
    BindRequested,
    Decision,
    EvictionRequested,
    NodeObserved,
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
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.state import ClusterState, apply
from tests.kai_defaults import DEFAULT_DEPARTMENT, NODE_CPU_CORES, NODE_MEMORY, POD_CPU_CORES, POD_MEMORY

DATA = Path(__file__).parent / "data"
T0 = 1_767_225_600.0
MINUTE = 60.0
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
        if text.startswith("pod_status."):
            return text.removeprefix("pod_status.")
        if text.startswith("constants.") and text.endswith("Strategy"):
            return {"constants.SpreadStrategy": "spread", "constants.BinpackStrategy": "binpack"}[text]
        raise ValueError(f"unsupported literal {text!r}")
    return value


def _get(obj: dict[str, Any], key: str, default: Any = None) -> Any:
    return _expr(obj[key]) if key in obj and obj[key] is not None else default


def _subgroups(job: dict[str, Any]) -> list[tuple[str, int]] | None:
    """(name, minMember) of each pod set of the job's ``RootSubGroupSet``, or None for the default one."""
    root = job.get("RootSubGroupSet")
    if root is None:
        return None
    text = root["$expr"] if isinstance(root, dict) and "$expr" in root else json.dumps(root)
    if m := re.fullmatch(r"jobs_fake\.DefaultSubGroup \( (\d+) \)", text):
        return [("default", int(m.group(1)))]
    found = re.findall(r'NewPodSet \( \\?"([\w-]+)\\?" , (\d+)', text)
    if not found:
        raise ValueError(f"unsupported RootSubGroupSet {text!r}")
    return [(n, int(k)) for n, k in found]


def events(topology: dict[str, Any]) -> list[AnyEvent]:
    out: list[AnyEvent] = []
    for name, node in sorted((topology.get("Nodes") or {}).items()):
        if _get(node, "MigStrategy"):
            raise ValueError("MIG nodes are not modelled")
        cpu = _get(node, "CPUMillis", NODE_CPU_CORES)
        memory = _get(node, "CPUMemory", NODE_MEMORY)
        spec = NodeSpec(
            name=name,
            uid=name,
            allocatable=Resources(
                gpu_milli=int(_get(node, "GPUs", 0)) * 1000, cpu_milli=int(cpu * 1000), memory=int(memory)
            ),
            gpu_memory_mib=int(_get(node, "GPUMemory", 0)),
        )
        out.append(NodeObserved(event_id=f"node-{name}", ts=T0, node=spec))
    departments = topology.get("Departments") or []
    queues = topology.get("Queues") or []
    if not departments and not topology.get("DisableDefaultDepartment"):
        departments = [{"Name": DEFAULT_DEPARTMENT, "DeservedGPUs": -1, "MaxAllowedGPUs": -1}]
        queues = [{**q, "ParentQueue": DEFAULT_DEPARTMENT} for q in queues]
    for i, dep in enumerate(departments):
        deserved = _get(dep, "DeservedGPUs", 0)
        limit = _get(dep, "MaxAllowedGPUs", 0) or -1
        res = QueueResources(
            gpu=QueueResource(quota=_gpu(deserved), limit=_gpu(limit), over_quota_weight=max(0, int(deserved))),
            cpu=QueueResource(quota=-1, limit=_cpu(_get(dep, "MaxAllowedCPUs"))),
            memory=QueueResource(quota=-1, limit=_mem(_get(dep, "MaxAllowedMemory"))),
        )
        spec_q = QueueSpec(name=dep["Name"], uid=dep["Name"], resources=res, created=T0 + i * MINUTE)
        out.append(QueueObserved(event_id=f"dep-{dep['Name']}", ts=T0, queue=spec_q))
    for i, q in enumerate(queues):
        res = QueueResources(
            gpu=QueueResource(
                quota=_gpu(_get(q, "DeservedGPUs", 0)),
                limit=_gpu(_get(q, "MaxAllowedGPUs", 0) or -1),
                over_quota_weight=int(_get(q, "GPUOverQuotaWeight", 0)),
            ),
            cpu=QueueResource(quota=_cpu(_get(q, "DeservedCPUs")), limit=_cpu(_get(q, "MaxAllowedCPUs"))),
            memory=QueueResource(quota=_mem(_get(q, "DeservedMemory")), limit=_mem(_get(q, "MaxAllowedMemory"))),
        )
        spec_q = QueueSpec(
            name=q["Name"],
            uid=q["Name"],
            parent=q.get("ParentQueue") or None,
            priority=int(_get(q, "Priority", 100)),
            resources=res,
            created=T0 + i * MINUTE,
        )
        out.append(QueueObserved(event_id=f"queue-{q['Name']}", ts=T0, queue=spec_q))
    jobs = sorted(topology.get("Jobs") or [], key=lambda j: -_get(j, "Priority", 0))
    for index, job in enumerate(jobs):
        out.extend(_job_events(job, index, len(jobs)))
    return out


def _gpu(value: float | None) -> int:
    return -1 if value is None or value == -1 else round(value * 1000)


def _cpu(value: float | None) -> int:
    return -1 if value is None or value == -1 else round(value)


def _mem(value: float | None) -> int:
    return -1 if value is None or value == -1 else round(value)


def _job_events(job: dict[str, Any], index: int, count: int) -> list[AnyEvent]:
    name = job["Name"]
    if job.get("IsBestEffortJob"):
        raise ValueError("best-effort (no request) jobs are not modelled")
    if job.get("RequiredGpuMemory"):
        raise ValueError("gpu-memory requests are ported separately")
    priority = int(_get(job, "Priority", 0))
    age = _get(job, "JobAgeInMinutes", 0)
    created = T0 - (age if age else count - index) * MINUTE
    tasks = job.get("Tasks") or []
    subgroups = _subgroups(job)
    min_member = len(tasks) if subgroups is None else sum(k for _, k in subgroups)
    named = tuple(SubGroupSpec(name=n, min_member=k) for n, k in subgroups or () if n != "default")
    group = PodGroupSpec(
        namespace="default",
        name=name,
        uid=name,
        queue=job["QueueName"],
        min_member=max(1, min_member),
        priority=priority,
        created=created,
        sub_groups=named,
    )
    out: list[AnyEvent] = [PodGroupObserved(event_id=f"pg-{name}", ts=T0, pod_group=group)]
    gpus = float(_get(job, "RequiredGPUsPerTask", 0))
    cpu = _get(job, "RequiredCPUsPerTask", POD_CPU_CORES)
    memory = _get(job, "RequiredMemoryPerTask", POD_MEMORY)
    for t, task in enumerate(tasks):
        state = _get(task, "State", "Pending")
        node = task.get("NodeName") or None
        task_gpus = float(_get(task, "RequiredGPUs", gpus))
        fraction = None if task_gpus == int(task_gpus) else round(task_gpus * 1000)
        indices = None
        if node and fraction is not None and task.get("GPUGroups"):
            indices = tuple(int(g) for g in task["GPUGroups"])
        task_priority = _get(task, "Priority")
        labels = {} if task_priority is None else {"kai.scheduler/task-priority": str(int(task_priority))}
        if state not in ("Pending", "Running", "Releasing", "Bound", "Allocated"):
            raise ValueError(f"task state {state} is not modelled")
        pod = PodSpec(
            namespace="default",
            name=f"{name}-{t}",
            uid=f"{name}-{t}",
            queue=job["QueueName"],
            pod_group=name,
            sub_group=task.get("SubGroupName") or None,
            requests=Resources(gpu_milli=round(task_gpus * 1000), cpu_milli=round(cpu * 1000), memory=round(memory)),
            gpu_fraction_milli=fraction,
            priority=priority,
            node_name=node if state != "Pending" else None,
            gpu_indices=indices,
            phase="Running" if node and state != "Pending" else "Pending",
            terminating=state == "Releasing",
            created=created,
            started=created if node and state != "Pending" else None,
            labels=labels,
        )
        out.append(PodObserved(event_id=f"pod-{name}-{t}", ts=T0, pod=pod))
    return out


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
