"""consolidation: move running preemptible jobs to other nodes so that a pending job fits; nothing is killed.

Per pending preemptible job (queue order) that allocate could not place and whose GPU request the pool's free GPU
covers in total (moving never frees capacity, it only gathers it) and whose queue admits it as things stand (moved
jobs keep their queue's allocation, so a job over its queue's limit stays refused), candidates are running
preemptible jobs of any queue — first those on the nodes with the most free GPU (the cheapest to empty), then
reverse job order. At most ``max_consolidation_preemptees`` jobs move. A set is accepted only when the pending
job's gang is placed on the capacity being released and every moved pod is re-placed on free capacity.

Decisions, since Kubernetes cannot re-bind a running pod: each moved pod gets ``EvictionRequested`` (details
``move_to`` / ``move_gpus``) followed by ``PodPipelined`` onto its new node — a nomination the next cycle honours
first when the pod (restarted by its controller, same name) is pending again; the pending job is
``PodPipelined`` onto the freed node. The emulated cluster of ``kai_stream.simulate`` re-creates a moved pod.

When no candidate's GPU request fits in the pool's free GPU as the action begins, every ``try_job`` would return
before searching (changing nothing, so the free GPU stays short for the next one): the action ends at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter

from kai_stream.core.scheduler.actions._common.fairness import queue_details
from kai_stream.core.scheduler.actions._common.solver import SearchSpec, awaiting, free_gpu, search
from kai_stream.core.scheduler.actions._common.victims import VictimUnit, running, victim_units
from kai_stream.core.scheduler.framework.info import GPU, UNIT, JobClass, JobInfo, NodeInfo, TaskInfo
from kai_stream.core.scheduler.framework.ordering import JobsByQueue
from kai_stream.core.scheduler.framework.session import Session

NAME = "consolidation"


def _node_free(node: NodeInfo) -> int:
    """Sum of ``gpu_free_now`` over the node's healthy GPUs."""
    total = 0
    for ok, used, rel, pipe in zip(node.healthy, node.gpu_used, node.gpu_rel, node.gpu_pipe, strict=True):
        if ok:
            total += UNIT - used - (pipe - rel if pipe > rel else 0)
    return total


class _Consolidation:
    def __init__(self, session: Session) -> None:
        self.ssn = session
        self._failed: dict[tuple[object, ...], int] = {}
        self._free: tuple[int, int] | None = None
        self._movable: list[JobInfo] | None = None

    @property
    def movable(self) -> list[JobInfo]:
        """Candidate jobs, ordered as of the session when consolidation began: built on first need only (every
        earlier ``try_job`` returned before searching, so nothing has moved), as it costs O(running pods)."""
        if self._movable is None:
            session = self.ssn
            movable = [j for j in session.jobs if j.queue is not None and j.preemptible and running(j)]
            by_job = sorted(movable, key=session.hooks.job_key, reverse=True)
            node_free: dict[int, int] = {}

            def emptiest(job: JobInfo) -> int:
                """Most free GPU on any node of the job (0 with no node)."""
                best: int | None = None
                for t in job.tasks:
                    node = t.node
                    if node is not None:
                        value = node_free.get(node.idx)
                        if value is None:
                            value = node_free[node.idx] = _node_free(node)
                        if best is None or value > best:
                            best = value
                return 0 if best is None else best

            ranked = sorted([(-emptiest(j), rank, j) for rank, j in enumerate(by_job)], key=itemgetter(0, 1))
            self._movable = [j for _, _, j in ranked]
        return self._movable

    def try_job(self, job: JobInfo) -> None:
        ssn = self.ssn
        pending = ssn.pending_of(job)
        if not pending or job.queue is None or not job.preemptible:
            return
        if ssn.awaited.get(job.key, 0) and not self.movable:
            return
        if awaiting(ssn, job):
            return
        request = ssn.job_request(job)
        if ssn.hooks.check_job(job, request) is not None:
            return
        if request[GPU] <= 0:
            return
        shape = (tuple(t.shape for t in pending), job.min_member, job.queue.name, job.topology)
        if self._failed.get(shape) == ssn.state_id:
            return
        if self._free is None or self._free[0] != ssn.state_id:
            self._free = (ssn.state_id, free_gpu(ssn))
        if self._free[1] < request[GPU] or not self.movable:
            return

        def candidates() -> Iterator[VictimUnit]:
            for victim in self.movable:
                if victim is not job and ssn.hooks.may_evict(NAME, job, victim):
                    units = victim_units(victim)
                    if units:
                        yield VictimUnit(victim, [t for u in units for t in u.tasks])

        def details(task: TaskInfo) -> dict[str, str]:
            out = queue_details("queue", task.job.queue) if task.job.queue is not None else {}
            out["preemptor_gpu_request"] = f"{request[GPU] / UNIT:g}"
            return out

        spec = SearchSpec(
            action=NAME,
            preemptor=job,
            candidates=candidates,
            validate=lambda taken: True,
            details=details,
            reason=f"moved so that {job.key} fits",
            move_victims=True,
            max_victim_jobs=ssn.config.max_consolidation_preemptees,
            max_units=ssn.config.max_consolidation_preemptees,
            pool_free_gpu=request[GPU],
        )
        start = ssn.state_id
        if not search(ssn, spec):
            self._failed[shape] = start


def run(session: Session) -> None:
    if session.config.max_consolidation_preemptees <= 0:
        return
    jobs = [j for j in session.pending_jobs if j.queue is not None and j.preemptible and session.pending_of(j)]
    if not jobs:
        return
    free = free_gpu(session)
    if not any(0 < session.job_request(j)[GPU] <= free for j in jobs):
        return
    consolidation = _Consolidation(session)
    order = JobsByQueue(session, jobs)
    quiet: JobClass | None = None
    for job in order.in_order():
        awaited = session.awaited.get(job.key, 0)
        if quiet is not None and order.followed and not awaited and session.job_class(job) == quiet:
            continue
        consolidation.try_job(job)
        quiet = None if awaited else session.job_class(job)
