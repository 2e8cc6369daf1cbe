"""Topology-aware placement: a job with a ``topologyConstraint`` is kept inside one domain.

A ``Topology`` (kai.scheduler/v1alpha1) lists node labels from the widest level to the narrowest (e.g. zone >
rack > hostname). A domain at level L is the set of nodes sharing the values of every label down to L. A node
lacking any label of the Topology, deeper levels included, is outside it and belongs to no domain (KAI v0.12.0
``isNodePartOfTopology``: a rack's nodes without ``kubernetes.io/hostname`` are not in the rack). Without a
Topology naming the level, the level's label alone defines the domains.

When a constrained job comes up (the job check every action runs before placing a job), the plugin tries the
domains at the preferred level, then at the required level, each list tightest first (least free GPU, then
fewest nodes, then label values), and restricts the node index to the first domain where the whole gang can
be placed (now or on releasing capacity). No domain at the required level fits -> the job is refused with
``NoNodeFits`` and KAI's words ("topology T, requirement L couldn't be satisfied for job <ns/name>") with what the
job needs and the most the best domain could place; a preferred level alone never refuses. Unconstrained jobs
clear the restriction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai_stream.core.events import PendingCode, TopologyConstraint
from kai_stream.core.scheduler.framework.info import PENDING, UNIT, JobInfo, NodeInfo

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session

Domain = tuple[tuple[str, ...], frozenset[int]]


class TopologyPlugin:
    name = "topology"

    def __init__(self) -> None:
        self.session: Session | None = None
        self.topologies: dict[str, tuple[str, ...]] = {}
        self._domains: dict[tuple[str | None, str], list[Domain]] = {}

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.topologies = session.topologies
        session.hooks.job_checks.append(self.check_job)

    def _levels(self, constraint: TopologyConstraint, level: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The labels down to ``level`` (they name a domain) and every label of the topology (a node lacking one
        of them is outside the topology, as in KAI's ``isNodePartOfTopology``)."""
        names = [constraint.topology] if constraint.topology else sorted(self.topologies)
        for name in names:
            levels = self.topologies.get(name or "")
            if levels is not None and level in levels:
                return levels[: levels.index(level) + 1], levels
        return (level,), (level,)

    def domains(self, constraint: TopologyConstraint, level: str) -> list[Domain]:
        """Every domain at ``level`` (of the constraint's topology) in the pool, in label-value order."""
        key = (constraint.topology, level)
        cached = self._domains.get(key)
        if cached is not None:
            return cached
        assert self.session is not None
        labels, required = self._levels(constraint, level)
        groups: dict[tuple[str, ...], list[int]] = {}
        for node in self.session.nodes:
            if any(label not in node.labels for label in required):
                continue
            groups.setdefault(tuple(node.labels[label] for label in labels), []).append(node.idx)
        found = [(values, frozenset(idx)) for values, idx in sorted(groups.items())]
        self._domains[key] = found
        return found

    @staticmethod
    def _free_gpu(nodes: list[NodeInfo], members: frozenset[int]) -> int:
        total = 0
        for i in members:
            node = nodes[i]
            total += sum(node.gpu_free_now(g) for g in range(len(node.healthy)) if node.healthy[g])
        return total

    def _fits(self, job: JobInfo) -> tuple[bool, int]:
        """Whether the job's pending tasks reach its gang inside the current restriction (tried, then undone), and
        how many of them were placed."""
        assert self.session is not None
        ssn = self.session
        stmt = ssn.statement("allocate")
        active = job.active_count()
        placed = 0
        for task in job.tasks:
            if task.status != PENDING:
                continue
            placement = ssn.index.find(task)
            if placement is not None:
                stmt.allocate(task, placement)
                placed += 1
        ok = placed > 0 and ssn.hooks.ready(job, active + placed)
        stmt.discard()
        return ok, placed

    def check_job(self, job: JobInfo, request: list[int]) -> tuple[PendingCode, str] | None:
        assert self.session is not None
        index = self.session.index
        index.allowed = None
        constraint = job.topology
        if constraint is None or not (constraint.required_level or constraint.preferred_level):
            return None
        nodes = self.session.nodes
        best: tuple[int, int, tuple[str, ...]] | None = None
        """At the required level: the most pods a domain could place, its free GPU and its label values."""
        for level in (constraint.preferred_level, constraint.required_level):
            if not level:
                continue
            ranked = sorted(
                (self._free_gpu(nodes, d[1]), len(d[1]), d[0], d[1]) for d in self.domains(constraint, level)
            )
            for free, _, values, members in ranked:
                index.allowed = members
                fits, placed = self._fits(job)
                if fits:
                    return None
                if level == constraint.required_level and (best is None or placed > best[0]):
                    best = (placed, free, values)
            index.allowed = None
        if constraint.required_level:
            return ("NoNodeFits", self._unsatisfied(job, constraint, constraint.required_level, best))
        return None

    def _unsatisfied(
        self,
        job: JobInfo,
        constraint: TopologyConstraint,
        level: str,
        best: tuple[int, int, tuple[str, ...]] | None,
    ) -> str:
        """KAI's words (``getNoTopologyMatchError``), with the numbers: what the job needs and what the domain
        that could place most of it has."""
        pending = [t for t in job.tasks if t.status == PENDING]
        gpu = sum(t.gpu_whole * UNIT + t.gpu_frac * t.gpu_devices for t in pending)
        found = len(self.domains(constraint, level))
        head = (
            f"topology {constraint.topology or '(none named)'}, requirement {level} couldn't be satisfied for job"
            f" <{job.key}>: it needs {len(pending)} pods ({gpu / UNIT:g} GPU)"
        )
        if best is None:
            return f"{head}; no node has the label(s) of level {level}"
        placed, free, values = best
        return (
            f"{head}; of {found} {level} domains, the best ({'/'.join(values)}) can allocate only {placed} of"
            f" {len(pending)} required pods, {free / UNIT:g} GPU free"
        )
