"""What a job means to the scheduler, from its pods and its PodGroup: priority, preemptibility, the queue it
runs in, its gang rules (minMember, subgroups), the order of its tasks and which of its pending tasks one
allocation pass offers (KAI ``GetTasksToAllocate``).

Pure functions over the state's specs and the session's working objects; the snapshot builder and the session
ask them, nothing here keeps state.
"""

from __future__ import annotations

from collections.abc import Mapping

from kai_stream.core.events import PodGroupSpec, PodSpec, PriorityClassSpec
from kai_stream.core.scheduler.framework.info import PENDING, RELEASING, JobInfo, QueueInfo, TaskInfo

__all__ = [
    "DEFAULT_PRIORITY_CLASS",
    "LABEL_TASK_PRIORITY",
    "UNRANKED",
    "job_order",
    "job_preemptible",
    "job_priority",
    "job_queue",
    "sub_groups",
    "task_order",
    "task_rank",
    "tasks_to_allocate",
]

DEFAULT_PRIORITY_CLASS = "train"
LABEL_TASK_PRIORITY = "kai.scheduler/task-priority"
UNRANKED = (2, 0)


def job_priority(
    group: PodGroupSpec | None, first: PodSpec, priority_classes: Mapping[str, PriorityClassSpec]
) -> int:
    """The PodGroup's own priority, else its (or the first pod's) priority class value, else the first pod's
    priority, else the default class's value."""
    class_name = (group.priority_class if group else None) or first.priority_class
    pclass = priority_classes.get(class_name) if class_name else None
    if group is not None and group.priority is not None:
        return group.priority
    if pclass is not None:
        return pclass.value
    if first.priority is not None:
        return first.priority
    return priority_classes[DEFAULT_PRIORITY_CLASS].value


def job_preemptible(group: PodGroupSpec | None, first: PodSpec, priority: int) -> bool:
    """Explicit on the PodGroup, else on the first pod, else below priority 100 (KAI's build/train divide)."""
    explicit = group.preemptible if group is not None else None
    if explicit is None:
        explicit = first.preemptible
    return explicit if explicit is not None else priority < 100


def job_queue(
    group: PodGroupSpec | None, first: PodSpec, default_queue: str, queues: Mapping[str, QueueInfo]
) -> tuple[str, QueueInfo | None]:
    """The queue name the job asks for (the first pod's, else its PodGroup's, else the default) and that queue
    when it is a leaf of the tree (None: unknown, or not a leaf: the job cannot run)."""
    name = first.queue or (group.queue if group is not None else "") or default_queue
    leaf = queues.get(name)
    return name, leaf if leaf is not None and not leaf.children else None


def sub_groups(group: PodGroupSpec) -> tuple[tuple[str, int], ...]:
    """(name, minMember) of each subgroup of ``group`` that holds pods (one no other subgroup names as parent)."""
    parents = {s.parent for s in group.sub_groups if s.parent}
    return tuple((s.name, s.min_member) for s in group.sub_groups if s.name not in parents)


def tasks_to_allocate(job: JobInfo, pending: list[TaskInfo]) -> list[TaskInfo]:
    """``Session.to_allocate`` from the job's pending tasks (in task order).

    With subgroups (KAI ``GetTasksToAllocate`` over pod sets): while some subgroups are below their minMember,
    each of them offers what it still needs; once all are satisfied, one subgroup offers one task. Subgroups go
    in KAI's subgroup order: below the minimum first, then those with a minimum before those without, then the
    lower allocated / minMember (without a minimum: fewer allocated), then declared order. Tasks outside the
    declared subgroups form one subgroup with no minimum. The job's own minMember is then topped up from the
    remaining tasks."""
    if not job.sub_groups and (len(pending) <= 1 or len(job.tasks) <= job.min_member):
        return pending
    _, active = job.alive_active()
    need = job.min_member - active
    if not job.sub_groups:
        take = need if need > 0 else 1
        return pending if take >= len(pending) else pending[:take]
    minimum: dict[str | None, int] = dict(job.sub_groups)
    minimum.setdefault(None, 0)
    done = dict.fromkeys(minimum, 0)
    waiting: dict[str | None, list[TaskInfo]] = {name: [] for name in minimum}
    for task in job.tasks:
        group = task.sub_group if task.sub_group in minimum else None
        if task.status == PENDING:
            waiting[group].append(task)
        elif task.status != RELEASING:
            done[group] += 1
    below = [name for name in minimum if done[name] < minimum[name]]
    rank = {name: i for i, name in enumerate(minimum)}

    def order(name: str | None) -> tuple[int, int, float, int]:
        k, n = minimum[name], done[name]
        if n < k:
            return (0, 0, 0.0, rank[name])
        return (1, 0, n / k, rank[name]) if k > 0 else (1, 1, float(n), rank[name])

    picked: set[int] = set()
    groups = 0
    for name in sorted(minimum, key=order):
        if groups >= max(len(below), 1):
            break
        if not waiting[name]:
            continue
        k, n = minimum[name], done[name]
        picked.update(id(t) for t in waiting[name][: k - n if n < k else 1])
        groups += 1
    if len(picked) < need:
        picked.update(id(t) for t in [t for t in pending if id(t) not in picked][: need - len(picked)])
    return [t for t in pending if id(t) in picked]


def task_rank(labels: Mapping[str, str]) -> tuple[int, int]:
    """Where a pod's label ``kai.scheduler/task-priority`` puts it among its job's tasks (KAI's taskorder plugin):
    labelled with an integer first, higher first; then labelled with anything else; then unlabelled."""
    value = labels.get(LABEL_TASK_PRIORITY)
    if value is None:
        return UNRANKED
    digits = value[1:] if value[:1] in ("+", "-") else value
    return (0, -int(value)) if digits.isascii() and digits.isdigit() else (1, 0)


def task_order(task: TaskInfo) -> tuple[float, str, str, str]:
    return (task.created, task.namespace, task.name, task.uid)


def job_order(job: JobInfo) -> tuple[float, str, str]:
    return (job.created, job.uid, job.key)
