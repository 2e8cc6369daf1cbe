"""Topology-aware placement: a job with a ``topologyConstraint`` is kept inside one domain.

A ``Topology`` (kai.scheduler/v1alpha1) lists node labels from the widest level to the narrowest (e.g. zone >
rack > hostname). A domain at level L is the set of nodes sharing the values of every label down to L. A node
lacking any label of the Topology, deeper levels included, is outside it and belongs to no domain (KAI v0.12.0
``isNodePartOfTopology``: a rack's nodes without ``kubernetes.io/hostname`` are not in the rack). Without a
Topology naming the level, the level's label alone defines the domains.

When a constrained job comes up (the job check every action runs before placing a job), the plugin tries the
domains of KAI's relevant levels (``relevant_levels``: from the preferred level, else the required one, up to the
required level, else up to the whole cluster), each level in KAI's order (``ranked``: under their parent's
domain, the fullest for the job first, then label value), and restricts the node index to the first domain where
the whole gang can be placed (now or on releasing capacity). A preferred level also orders the nodes the job's
tasks take (``NodeIndex.tiers``: KAI's preferred-level node scores, which favour the domains last in that order),
which matters when no preferred domain holds the job. No domain at the required level fits -> the job is refused
with ``NoNodeFits`` and KAI's words ("topology T, requirement L couldn't be satisfied for job <ns/name>") with
what the job needs and the most the best domain could place; a preferred level alone never refuses.
Unconstrained jobs clear the restriction.

Subgroups (``spec.subGroups[].topologyConstraint``, KAI's subgroup sets and pod sets): inside the job's domain, each
subgroup with a constraint is tried in the domains of its own relevant levels (in KAI's order, inside its parent's
domain) for the tasks the job offers in this pass; the first domain where the subgroup reaches its minMember is kept
for its tasks (``NodeIndex.allowed_for``). With a required level, a job's or subgroup's next pods stay in the required
domain of its active ones (``_home``). A subgroup whose required level no domain satisfies refuses the job with KAI's
words naming the subgroup (", subgroup S").
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from kai_stream.core.events import PendingCode, SubGroupSpec, TopologyConstraint
from kai_stream.core.scheduler.framework.info import (
    ALLOCATED,
    PENDING,
    PIPELINED,
    RUNNING,
    UNIT,
    JobInfo,
    NodeInfo,
    TaskInfo,
)

if TYPE_CHECKING:
    from kai_stream.core.scheduler.framework.session import Session
    from kai_stream.core.scheduler.framework.statement import Statement

Domain = tuple[tuple[str, ...], frozenset[int]]


class TopologyPlugin:
    name = "topology"

    def __init__(self) -> None:
        self.session: Session | None = None
        self.topologies: dict[str, tuple[str, ...]] = {}
        self._domains: dict[tuple[str | None, str], list[Domain]] = {}
        self._failed: SubGroupSpec | None = None

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

    def relevant_levels(self, constraint: TopologyConstraint) -> list[str | None]:
        """KAI's levels a constrained job is tried at, narrowest first: from the preferred level (else the required
        one) up to the required level, or up to the whole cluster (None) without one. Without a Topology naming
        the levels: the preferred level, then the required one (or the whole cluster)."""
        first = constraint.preferred_level or constraint.required_level
        assert first is not None
        _, every = self._levels(constraint, first)
        order: list[str | None] = [*reversed(every), None]
        last: str | None = constraint.required_level
        if first not in every or (last is not None and last not in every):
            named: list[str | None] = [level for level in (constraint.preferred_level, last) if level]
            return named if last else [*named, None]
        start = order.index(first)
        return order[start : order.index(last) + 1]

    def ranked(
        self, constraint: TopologyConstraint, level: str, within: AbstractSet[int] | None, request: tuple[int, int, int]
    ) -> list[Domain]:
        """The domains at ``level`` inside ``within`` in KAI's order (``sortTree``, then level order): each level's
        domains under their parent's, siblings by the share of their free resources (idle and releasing) the job
        ``request`` (GPU milli, CPU milli, memory) would take, largest first (the fullest), then label value."""
        assert self.session is not None
        nodes = self.session.nodes
        found = [
            (values, members if within is None else frozenset(i for i in members if i in within))
            for values, members in self.domains(constraint, level)
        ]
        found = [(values, members) for values, members in found if members]
        free: dict[tuple[str, ...], list[int]] = {}
        for values, members in found:
            own = self._free(nodes, members)
            for k in range(1, len(values) + 1):
                total = free.setdefault(values[:k], [0, 0, 0])
                for r in range(3):
                    total[r] += own[r]

        def ratio(prefix: tuple[str, ...]) -> float:
            share = 0.0
            for need, have in zip(request, free[prefix], strict=True):
                if need > 0:
                    share = max(share, need / have if have > 0 else 1000.0)
            return share

        return sorted(found, key=lambda d: tuple((-ratio(d[0][: k + 1]), d[0][k]) for k in range(len(d[0]))))

    def _home(
        self, constraint: TopologyConstraint, tasks: list[TaskInfo], within: AbstractSet[int] | None
    ) -> AbstractSet[int] | None:
        """``within`` narrowed to the required-level domain that already holds the active pods among ``tasks``
        (KAI's ``getRelevantDomainsWithAllocatedPods``: an elastic job's or subgroup's next pods join the running
        ones); ``within`` itself without a required level or active pods."""
        level = constraint.required_level
        active = sorted(t.node.idx for t in tasks if t.node is not None and t.status in (RUNNING, ALLOCATED, PIPELINED))
        if not level or not active:
            return within
        for _, members in self.domains(constraint, level):
            if active[0] in members:
                return members if within is None else frozenset(i for i in members if i in within)
        return within

    @staticmethod
    def _free(nodes: list[NodeInfo], members: AbstractSet[int]) -> tuple[int, int, int]:
        gpu = cpu = mem = 0
        for i in sorted(members):
            node = nodes[i]
            gpu += sum(node.gpu_free_future(g) for g in range(len(node.healthy)) if node.healthy[g])
            cpu += node.cpu_free_future()
            mem += node.mem_free_future()
        return gpu, cpu, mem

    @staticmethod
    def _request(tasks: list[TaskInfo]) -> tuple[int, int, int]:
        gpu = sum(t.gpu_request for t in tasks)
        return gpu, sum(t.cpu for t in tasks), sum(t.mem for t in tasks)

    def _tiers(
        self, constraint: TopologyConstraint, request: tuple[int, int, int], within: AbstractSet[int] | None = None
    ) -> list[frozenset[int]]:
        """KAI's preferred-level node scores (``calculateNodeScores``) as node tiers, best first: the i-th of n
        preferred-level domains (inside ``within``) in KAI's order scores floor(10 (i + 1) / n), so the last ones
        (the emptiest) go first; the other nodes last."""
        assert self.session is not None and constraint.preferred_level
        ordered = self.ranked(constraint, constraint.preferred_level, within, request)
        by_score: dict[int, set[int]] = {}
        for i, (_, members) in enumerate(ordered):
            by_score.setdefault(10 * (i + 1) // len(ordered), set()).update(members)
        inside = set().union(*by_score.values()) if by_score else set()
        rest = frozenset(n.idx for n in self.session.nodes if n.idx not in inside)
        return [frozenset(by_score[k]) for k in sorted(by_score, reverse=True)] + ([rest] if rest else [])

    @staticmethod
    def _free_gpu(nodes: list[NodeInfo], members: frozenset[int]) -> int:
        total = 0
        for i in members:
            node = nodes[i]
            total += sum(node.gpu_free_now(g) for g in range(len(node.healthy)) if node.healthy[g])
        return total

    def _fits(self, job: JobInfo) -> tuple[bool, int]:
        """Whether the job's pending tasks reach its gang inside the current restriction (tried, then undone), and
        how many of them were placed; with subgroup constraints, each subgroup inside a domain of its own
        (``_place_group``), whose nodes are then kept for its tasks in ``NodeIndex.allowed_for``."""
        assert self.session is not None
        ssn = self.session
        stmt = ssn.statement("allocate")
        active = job.active_count()
        if job.sub_group_specs:
            narrowed: dict[str, AbstractSet[int]] = {}
            offered = ssn.to_allocate(job)
            placed = self._place_group(job, offered, None, ssn.index.allowed, stmt, narrowed)
        else:
            placed = self._place(job.tasks, stmt)
        ok = placed > 0 and ssn.hooks.ready(job, active + placed)
        stmt.discard()
        if ok and job.sub_group_specs:
            ssn.index.allowed_for = narrowed
        return ok, placed

    def _place(self, tasks: list[TaskInfo], stmt: Statement) -> int:
        assert self.session is not None
        find = self.session.index.find
        placed = 0
        for task in tasks:
            if task.status != PENDING:
                continue
            placement = find(task)
            if placement is not None:
                stmt.allocate(task, placement)
                placed += 1
        return placed

    def _place_group(
        self,
        job: JobInfo,
        offered: list[TaskInfo],
        spec: SubGroupSpec | None,
        within: AbstractSet[int] | None,
        stmt: Statement,
        narrowed: dict[str, AbstractSet[int]],
        tiers: list[frozenset[int]] | None = None,
    ) -> int:
        """Place the tasks the job offers in this pass (``Session.to_allocate``, as KAI picks each subgroup's
        domain for the tasks it allocates now) of subgroup ``spec`` (None: the whole job) inside ``within``: its child
        subgroups first, each in a domain of its own constraint inside ``within`` (tried tightest first, the
        first where the child reaches its minMember kept), then its own pods, in the node tiers of the nearest
        subgroup with a preferred level (``tiers``; None: the job's, ``NodeIndex.tiers``); how many were placed, or
        -1 when a child subgroup with a required level fits no domain (the first such failure is kept for the
        reason)."""
        assert self.session is not None
        index = self.session.index
        name = None if spec is None else spec.name
        placed = 0
        for child in job.sub_group_specs:
            if child.parent != name:
                continue
            placed_child = -1
            child_tiers = tiers
            constraint = child.topology_constraint
            if constraint is not None and constraint.preferred_level:
                needs = self._request([t for t in offered if t.sub_group in self._subtree(job, child.name)])
                child_tiers = self._tiers(constraint, needs, within)
            for members in self._sub_domains(job, offered, child, within):
                checkpoint = stmt.checkpoint()
                got = self._place_group(job, offered, child, members, stmt, narrowed, child_tiers)
                if got >= 0 and self._reached(job, child):
                    placed_child = got
                    break
                stmt.rollback(checkpoint)
            if placed_child < 0:
                required = child.topology_constraint is not None and child.topology_constraint.required_level
                if self._failed is None and required:
                    self._failed = child
                return -1
            placed += placed_child
        own = [t for t in offered if t.status == PENDING and self._leaf_of(job, t) == name]
        if own:
            if tiers is not None:
                for task in own:
                    index.tiers_for[task.uid] = tiers
            outer, index.allowed = index.allowed, within
            try:
                placed += self._place(own, stmt)
            finally:
                index.allowed = outer
            if name is not None and within is not None:
                for task in own:
                    narrowed[task.uid] = within
        return placed

    @staticmethod
    def _leaf_of(job: JobInfo, task: TaskInfo) -> str | None:
        """The declared subgroup holding ``task`` (None: the job itself)."""
        group = task.sub_group
        if group is None:
            return None
        return group if any(s.name == group for s in job.sub_group_specs) else None

    @staticmethod
    def _reached(job: JobInfo, spec: SubGroupSpec) -> bool:
        """Whether a leaf subgroup has its minMember active (a parent: its children were checked)."""
        if any(s.parent == spec.name for s in job.sub_group_specs):
            return True
        active = sum(1 for t in job.tasks if t.sub_group == spec.name and t.status in (ALLOCATED, PIPELINED, RUNNING))
        return active >= spec.min_member

    def _sub_domains(
        self, job: JobInfo, offered: list[TaskInfo], spec: SubGroupSpec, within: AbstractSet[int] | None
    ) -> list[AbstractSet[int] | None]:
        """The node sets subgroup ``spec`` may be tried in, in order: the domains of its relevant levels inside
        ``within`` (``relevant_levels``, each level in KAI's order for the subgroup's offered tasks); ``within``
        itself last unless a required level is given."""
        constraint = spec.topology_constraint
        if constraint is None or not (constraint.required_level or constraint.preferred_level):
            return [within]
        assert self.session is not None
        names = self._subtree(job, spec.name)
        request = self._request([t for t in offered if t.sub_group in names])
        within = self._home(constraint, [t for t in job.tasks if t.sub_group in names], within)
        found: list[AbstractSet[int] | None] = []
        for level in self.relevant_levels(constraint):
            if level is None:
                found.append(within)
                break
            found.extend(members for _, members in self.ranked(constraint, level, within, request))
        return found

    def check_job(self, job: JobInfo, request: list[int]) -> tuple[PendingCode, str] | None:
        assert self.session is not None
        index = self.session.index
        index.allowed = index.tiers = None
        if index.allowed_for:
            index.allowed_for = {}
        if index.tiers_for:
            index.tiers_for = {}
        constraint = job.topology
        if constraint is None:
            return None
        needs = self._request(self.session.to_allocate(job))
        if constraint.preferred_level:
            index.tiers = self._tiers(constraint, needs)
        nodes = self.session.nodes
        best: tuple[int, int, tuple[str, ...]] | None = None
        """At the required level: the most pods a domain could place, its free GPU and its label values."""
        levelled = bool(constraint.required_level or constraint.preferred_level)
        for level in self.relevant_levels(constraint) if levelled else []:
            if level is None:
                break
            self._failed = None
            for values, members in self.ranked(constraint, level, self._home(constraint, job.tasks, None), needs):
                index.allowed = members
                fits, placed = self._fits(job)
                if fits:
                    return None
                if level == constraint.required_level and (best is None or placed > best[0]):
                    best = (placed, self._free_gpu(nodes, members), values)
            index.allowed = None
        if constraint.required_level:
            if self._failed is not None:
                return ("NoNodeFits", self._sub_group_unsatisfied(job, self._failed))
            return ("NoNodeFits", self._unsatisfied(job, constraint, constraint.required_level, best))
        if not job.sub_group_specs:
            return None
        self._failed = None
        fits, _ = self._fits(job)
        if fits or self._failed is None:
            return None
        return ("NoNodeFits", self._sub_group_unsatisfied(job, self._failed))

    def _sub_group_unsatisfied(self, job: JobInfo, spec: SubGroupSpec) -> str:
        """KAI's words for a subgroup whose required level no domain satisfies, with what the subgroup needs."""
        constraint = spec.topology_constraint
        assert constraint is not None
        level = constraint.required_level or ""
        names = self._subtree(job, spec.name)
        parents = {s.parent for s in job.sub_group_specs}
        need = sum(s.min_member for s in job.sub_group_specs if s.name in names and s.name not in parents)
        pending = [t for t in job.tasks if t.status == PENDING and t.sub_group in names]
        gpu = self._request(pending)[0]
        found = len(self.domains(constraint, level))
        return (
            f"topology {constraint.topology or '(none named)'}, requirement {level} couldn't be satisfied for job"
            f" <{job.key}>, subgroup {spec.name}: it needs {need} of its {len(pending)} pending pods"
            f" ({gpu / UNIT:g} GPU) in one {level} domain; none of the {found} domains can hold them"
        )

    @staticmethod
    def _subtree(job: JobInfo, name: str) -> set[str]:
        names = {name}
        grew = True
        while grew:
            grew = False
            for s in job.sub_group_specs:
                if s.parent in names and s.name not in names:
                    names.add(s.name)
                    grew = True
        return names

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
        gpu = self._request(pending)[0]
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
