"""Static predicates: nodeSelector, required node affinity, taints/tolerations; and the refusal of a job with a pod
whose DRA claims cannot be served (``JobInfo.refused``).

Results are cached per (pod signature, node class) by the node index, so these read only the pod's
selector/affinity/tolerations and the node's labels/taints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai_stream.core.events import NodeSelectorRequirement, PendingCode, Taint, Toleration
from kai_stream.core.scheduler.framework.info import JobInfo, NodeInfo, TaskInfo

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session

_HARD_EFFECTS = ("NoSchedule", "NoExecute")


def node_selector(task: TaskInfo, node: NodeInfo) -> str | None:
    labels = node.labels
    for key, value in task.node_selector.items():
        if labels.get(key) != value:
            return "NodeSelector"
    return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _matches(req: NodeSelectorRequirement, labels: dict[str, str]) -> bool:
    value = labels.get(req.key)
    match req.operator:
        case "In":
            return value is not None and value in req.values
        case "NotIn":
            return value is None or value not in req.values
        case "Exists":
            return value is not None
        case "DoesNotExist":
            return value is None
        case "Gt" | "Lt":
            have, bound = _int(value), _int(req.values[0] if req.values else None)
            if have is None or bound is None:
                return False
            return have > bound if req.operator == "Gt" else have < bound
    return False


def node_affinity(task: TaskInfo, node: NodeInfo) -> str | None:
    if not task.affinity:
        return None
    for term in task.affinity:
        if all(_matches(req, node.labels) for req in term.match_expressions):
            return None
    return "NodeAffinity"


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.operator == "Exists":
        return not toleration.key or toleration.key == taint.key
    return toleration.key == taint.key and toleration.value == taint.value


def taints(task: TaskInfo, node: NodeInfo) -> str | None:
    for taint in node.taints:
        if taint.effect in _HARD_EFFECTS and not any(tolerates(t, taint) for t in task.tolerations):
            return "Taints"
    return None


def refused(job: JobInfo, request: list[int]) -> tuple[PendingCode, str] | None:
    """A job with a pod whose DRA claims cannot be served (``JobInfo.refused``) is not placed."""
    return None if job.refused is None else ("ResourceClaimUnusable", job.refused)


class PredicatesPlugin:
    name = "predicates"

    def on_session_open(self, session: Session) -> None:
        session.hooks.predicates.extend(
            [("NodeSelector", node_selector), ("NodeAffinity", node_affinity), ("Taints", taints)]
        )
        if any(job.refused is not None for job in session.pending_jobs):
            session.hooks.job_checks.append(refused)
