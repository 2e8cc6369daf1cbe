"""reclaim: a pending job takes resources from other queues that hold more than their share.

Per pending job (queue order), when its leaf queue stays within fair share with the job (a non-preemptible job:
within deserved), victims are preemptible running jobs of other leaf queues (their pods pipelined earlier in the
session too: KAI's active-allocated victims; taking one withdraws its nomination) that the victim scopes allow for the
job's leaf queue (min-runtime, resolved per reclaimer and victim leaf; a protected elastic job gives only its
surplus pods). Victim queues come in KAI's victim order: the queue that would be scheduled last gives first,
re-ranked after every victim unit with what it gave taken off its dominant share (``VictimOrder``); each queue's
jobs in reverse job order, elastic jobs' surplus pods before the gang cores of their priority
(``units_in_victim_order``). A queue gives while, at the level below the common ancestor of the two leaves, its
side is over its allocatable share on some resource, or over its deserved quota on some resource while the
reclaimer's side stays within its own on all (KAI's reclaim strategies); a queue that does not give still offers the
units the pool's free capacity could hold, since a victim the simulation moves (consolidating reclaim) or puts back
gives nothing. A victim set is accepted when the job's gang is placed (the job checks, queue limits among them, read
after the victims' release: a job refused up front only by a limit that those releases could lift searches) and, on
the victims the simulation leaves evicted: each victim side still gives before its last victim is taken off it, and
at every level of the reclaimer's ancestry, against every sibling that lost victims, on every
resource involved (the job's and the sibling's victims'), the reclaimer side does not end above its fair share
(allocated / fair share > 1) at or above the sibling's saturation (KAI's reclaimable.go
``isFairShareSaturationLowerPerResource``, multiplier 1), and a non-preemptible job's side keeps its non-preemptible
pods within its deserved quota. What a victim queue gives is counted down by the units it gave to the search so far
(what their evictions take from its allocation), so the candidates do not read the evictions themselves and the
search may defer them (``SearchSpec.fixed_candidates``).

A job whose queue is past its fair share gets the pending reason ``NotEnoughOverQuotaShare``. Once a search
fails, jobs of the same shape in the same queue are not searched again in this action run (later reclaims only
lower the other queues' excess). A job whose search fails (or is skipped for its shape) also gets that reason
when its queue was past its fair share with the job as this action began: evictions from the queue committed
earlier in the run (for other queues' jobs; still releasing) can bring it within its share only for the rest of
this run, and the job's reason must not flip to allocate's ``NoNodeFits`` for one cycle and back on the next.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator

from kai_stream.core.events import PendingCode
from kai_stream.core.scheduler.actions._common.fairness import (
    UNLIMITED,
    queue_details,
    saturation_lower,
    within,
)
from kai_stream.core.scheduler.actions._common.reasons import protected_reason, share_reason
from kai_stream.core.scheduler.actions._common.solver import SearchSpec, awaiting, free_gpu, search
from kai_stream.core.scheduler.actions._common.victimorder import VictimOrder, kai_allocatable
from kai_stream.core.scheduler.actions._common.victims import (
    VictimLists,
    VictimUnit,
    units_in_victim_order,
    victim_judges,
)
from kai_stream.core.scheduler.framework.info import RUNNING, JobClass, JobInfo, QueueInfo, TaskInfo
from kai_stream.core.scheduler.framework.ordering import JobsByQueue
from kai_stream.core.scheduler.framework.session import Session

NAME = "reclaim"


class _Reclaim:
    def __init__(self, session: Session) -> None:
        self.ssn = session
        self._pool_free: int | None = None
        self._pool_free_cpu: int | None = None
        self._movable: dict[str, bool] = {}
        """Per leaf: ``may_move_some``, read when first asked."""
        self.victims = VictimLists(session.hooks.job_key, victim_judges(session, NAME), pipelined=True)
        self._gave_up: set[tuple[object, ...]] = set()
        self._leaves = [q for q in session.queues.values() if not q.children and q.jobs]
        self._spent: set[Hashable] = set()
        """Victim lists (``VictimLists.key``: a queue, or a queue and the judges a reclaimer leaf resolved to when
        victim scopes are registered) with no victim left (evictions committed by earlier searches of this run are
        final)."""
        self._at_start = {q.name: list(q.allocated) for q in self._leaves}
        """Each leaf's allocation as this action began (for the pending reason of a job whose search failed)."""
        self._sides: dict[str, list[_Side]] = {}
        """Per reclaimer leaf: ``_sides_from``."""
        self._pairs: dict[tuple[str, str], tuple[QueueInfo, QueueInfo]] = {}
        """(reclaimer leaf, victim leaf) -> ``leveled`` of the two (for the validator's victims)."""
        self._victim_keys: dict[str, tuple[int, tuple[object, ...]]] = {}
        """``VictimOrder`` keys of queues as they stand, with the queue's version (shared by the searches)."""
        self._allocatable: dict[str, tuple[int, int, int]] = {}
        """KAI's allocatable share per queue (fixed for the session)."""

    @property
    def pool_free(self) -> int:
        """The pool's free GPU when the action began: computed at the first search, before which nothing was
        placed or evicted."""
        if self._pool_free is None:
            self._pool_free = free_gpu(self.ssn)
        return self._pool_free

    def caps(self, v: QueueInfo) -> tuple[int, int, int]:
        """KAI's allocatable share of ``v`` per resource (fixed for the session)."""
        caps = self._allocatable.get(v.name)
        if caps is None:
            caps = self._allocatable[v.name] = (kai_allocatable(v, 0), kai_allocatable(v, 1), kai_allocatable(v, 2))
        return caps

    def leveled(self, leaf: QueueInfo, q: QueueInfo) -> tuple[QueueInfo, QueueInfo]:
        """For the reclaimer leaf ``leaf`` and the victim leaf ``q``: the victim's side and the reclaimer's side
        below their common ancestor."""
        pair = self._pairs.get((leaf.name, q.name))
        if pair is None:
            mine = leaf.ancestry()
            on_mine = {a.name for a in mine}
            v = q
            while v.parent is not None and v.parent.name not in on_mine:
                v = v.parent
            side = mine[-1] if v.parent is None else next(p for p in mine if p.parent is v.parent)
            pair = self._pairs[(leaf.name, q.name)] = (v, side)
        return pair

    @property
    def pool_free_cpu(self) -> int:
        """The pool's free CPU when the action began (read at the first search, like ``pool_free``)."""
        if self._pool_free_cpu is None:
            self._pool_free_cpu = sum(n.cpu_free_now() for n in self.ssn.nodes if n.ready and not n.unschedulable)
        return self._pool_free_cpu

    def may_move(self, unit: VictimUnit) -> bool:
        """Whether the pool's free capacity as the action began could hold the unit (GPU and CPU in total): a unit
        of a queue that does not give is a victim only if the simulation moves it. Capacity that other victims of the
        same search release is not counted, so a move onto it is not searched for (a limit of the project's search,
        not of KAI's)."""
        return unit.gpu <= self.pool_free and sum(t.cpu for t in unit.tasks) <= self.pool_free_cpu

    def may_move_some(self, q: QueueInfo) -> bool:
        """Whether some unit of the leaf ``q`` may pass ``may_move``: its smallest running preemptible pod (GPU, then
        CPU) fits the pool's free capacity as the action began (read when first asked; fixed for the action)."""
        movable = self._movable.get(q.name)
        if movable is None:
            movable = self._movable[q.name] = _some_fit(q, self.pool_free, self.pool_free_cpu)
        return movable

    def candidates(self, reclaimer: JobInfo, request: list[int]) -> Iterator[VictimUnit]:
        """Victim units for ``reclaimer`` in KAI's victim order (``VictimOrder``), each queue's jobs in reverse job
        order. A queue that gives (``_gives``, read at the level below the common ancestor of the reclaimer's and
        the victim's leaves, with what the queue gave to this search taken off) offers every unit; one that does
        not offers only units the pool could hold elsewhere (``may_move``): KAI takes victims from every queue and
        its validator counts only those its simulation leaves evicted (a moved victim gives nothing). A queue's
        list of victim jobs is read when it is first ranked best (none of its jobs is evicted by this search
        before that); one with none left is dropped then, which changes no other queue's rank."""
        leaf = reclaimer.queue
        assert leaf is not None
        queues = self.ssn.queues
        order = VictimOrder(self._victim_keys)
        guaranteed = {side.name: _within_quota(side.allocated, request, side) for side in leaf.ancestry()}
        spent = self._spent
        victims = self.victims
        judged = victims.judges is not None
        pools: dict[str, _Pool] = {}
        for group in self._sides_from(leaf):
            v, side = group.v, group.side
            if _gives(v, group.caps, v.allocated, guaranteed[side.name]):
                for q in group.leaves:
                    key = victims.key(reclaimer, q) if judged else q.name
                    if key not in spent:
                        pools[q.name] = _Pool(key, v, side, True)
                continue
            kept: list[QueueInfo] = []
            for q in group.maybe_movable:
                key = victims.key(reclaimer, q) if judged else q.name
                if key in spent:
                    kept.append(q)
                elif self.may_move_some(q):
                    kept.append(q)
                    pools[q.name] = _Pool(key, v, side, False)
            group.maybe_movable = kept
        order.rank_all(queues[n] for n in pools)
        while pools:
            best = order.best(pools)
            assert best is not None
            name = best.name
            pool = pools[name]
            units = pool.units
            if units is None:
                jobs, start, surplus = victims.live(best, pool.key)
                if start >= len(jobs):
                    spent.add(pool.key)
                    del pools[name]
                    continue
                units = pool.units = units_in_victim_order(
                    jobs, surplus, start, victims.runs(pool.key, jobs), pipelined=True
                )
            unit = next(units, None)
            if unit is None:
                del pools[name]
                continue
            if not pool.giving and not self.may_move(unit):
                continue
            yield unit
            order.give(queues[name], unit.tasks)
            if pool.giving and not _gives(pool.v, self.caps(pool.v), order.left(pool.v), guaranteed[pool.side.name]):
                pool.giving = False

    def _sides_from(self, leaf: QueueInfo) -> list[_Side]:
        """The other leaves seen from the reclaimer leaf ``leaf``, grouped by their side below the common ancestor
        (``_Side``), computed once. Leaves under one victim side share its verdict in a search (``_gives`` reads
        the two sides only, and nothing was given when the candidates are listed)."""
        sides = self._sides.get(leaf.name)
        if sides is None:
            mine = leaf.ancestry()
            on_mine = {q.name for q in mine}
            by_side: dict[str, _Side] = {}
            for q in self._leaves:
                if q is leaf:
                    continue
                v = q
                while v.parent is not None and v.parent.name not in on_mine:
                    v = v.parent
                group = by_side.get(v.name)
                if group is None:
                    side = mine[-1] if v.parent is None else next(p for p in mine if p.parent is v.parent)
                    group = by_side[v.name] = _Side(v, side, self.caps(v))
                group.leaves.append(q)
            sides = self._sides[leaf.name] = [*by_side.values()]
            for group in sides:
                group.maybe_movable = list(group.leaves)
        return sides

    def validator(self, reclaimer: JobInfo, request: list[int]) -> SearchSpec:
        leaf = reclaimer.queue
        assert leaf is not None

        involved_request = _bits(r for r in range(3) if request[r] > 0)
        ancestry = leaf.ancestry()
        guaranteed = {side.name: _within_quota(side.allocated, request, side) for side in ancestry}

        def saturation(taken: list[VictimUnit]) -> bool:
            involved: dict[str, int] = {}
            for unit in taken:
                q = unit.job.queue
                used = _resources_of(unit)
                while q is not None:
                    involved[q.name] = involved.get(q.name, 0) | used
                    q = q.parent
            for side in ancestry:
                if not reclaimer.preemptible and any(
                    side.quota[r] != UNLIMITED and side.allocated_np[r] > side.quota[r] for r in range(3)
                ):
                    return False
                siblings = side.parent.children if side.parent is not None else self.ssn.roots
                for sibling in siblings:
                    lost = involved.get(sibling.name)
                    if sibling is side or lost is None:
                        continue
                    if not saturation_lower(side, sibling, _RESOURCES_OF_BITS[lost | involved_request]):
                        return False
            return True

        def validate(victims: list[VictimUnit]) -> bool:
            """KAI's reclaim validator on the victims a simulation leaves evicted: each victim side still gives
            (``_gives``) before its last victim is taken off it, and the saturation check holds."""
            last: dict[str, tuple[QueueInfo, QueueInfo, VictimUnit]] = {}
            for unit in victims:
                q = unit.job.queue
                if q is not None:
                    v, side = self.leveled(leaf, q)
                    last[v.name] = (v, side, unit)
            for v, side, unit in last.values():
                remaining = list(v.allocated)
                for t in unit.tasks:
                    remaining[0] += len(t.gpus) * t.gpu_portion
                    remaining[1] += t.cpu
                    remaining[2] += t.mem
                if not _gives(v, self.caps(v), remaining, guaranteed[side.name]):
                    return False
            return saturation(victims)

        memo: dict[str, dict[str, str]] = {}
        reclaimer_details: dict[str, str] | None = None

        def details(task: TaskInfo) -> dict[str, str]:
            """The reclaimer's numbers (its queue does not change before the search's first eviction) and the victim
            queue's as the search's first eviction from that queue found them."""
            nonlocal reclaimer_details
            if reclaimer_details is None:
                reclaimer_details = queue_details("reclaimer", leaf)
            mine = reclaimer_details
            victim_queue = task.job.queue
            if victim_queue is None:
                return dict(mine)
            out = memo.get(victim_queue.name)
            if out is None:
                out = {**mine, **queue_details("victim", victim_queue)}
                memo[victim_queue.name] = out
            return dict(out)

        return SearchSpec(
            action=NAME,
            preemptor=reclaimer,
            candidates=lambda: self.candidates(reclaimer, request),
            validate=validate,
            doomed=lambda taken: self.ssn.hooks.check_job(reclaimer, request) is not None or not saturation(taken),
            details=details,
            reason=f"reclaimed for {reclaimer.key} (queue {leaf.name} within fair share)",
            pool_free_gpu=self.pool_free,
            fixed_candidates=True,
        )

    def try_job(self, job: JobInfo) -> str | None:
        """Try ``job``; the bound its queue would exceed ("fair share" or "deserved quota") when that alone ended
        it (``over_share``: a job of its class, after it with nothing changed, ends the same way), else None."""
        ssn = self.ssn
        pending = ssn.pending_of(job)
        leaf = job.queue
        if not pending or leaf is None:
            return None
        if awaiting(ssn, job):
            return None
        request = ssn.job_request(job)
        verdict = _verdict(job, request, ssn.hooks.check_job)
        if verdict == _REFUSED:
            return None
        if verdict != _SEARCHES:
            self.over_share(job, pending, verdict, leaf.allocated)
            return verdict
        bound = "fair share" if job.preemptible else "deserved quota"
        shape = (tuple(t.shape for t in pending), job.min_member, leaf.name, job.preemptible, job.topology)
        if shape in self._gave_up:
            self.over_share_at_start(job, pending, request, bound)
            return None
        if not search(ssn, self.validator(job, request)):
            self._gave_up.add(shape)
            self.over_share_at_start(job, pending, request, bound)
        return None

    def over_share(self, job: JobInfo, pending: list[TaskInfo], bound: str, allocated: list[int]) -> None:
        """Give ``pending`` the reason for its queue passing ``bound`` at ``allocated``: ``NotEnoughOverQuotaShare``,
        or ``InsufficientCapacity`` when the pool could not hold it anyway (``share_reason``)."""
        previous = self.ssn.pending.get(pending[0].uid)
        predicates = previous.predicates if previous is not None else {}
        info = share_reason(self.ssn, job, self.ssn.job_request(job), allocated, bound, predicates)
        self.ssn.set_pending(pending, info)

    def over_share_at_start(self, job: JobInfo, pending: list[TaskInfo], request: list[int], bound: str) -> None:
        """After a failed search: ``NotEnoughOverQuotaShare`` if the queue was over its bound with the job as the
        action began, else ``MinRuntimeProtected`` if min-runtime kept victims from it (``protected_reason``);
        the reason allocate gave stays otherwise."""
        leaf = job.queue
        assert leaf is not None
        start = self._at_start[leaf.name]
        limit = leaf.fair_share if job.preemptible else leaf.quota
        for r in range(3):
            if request[r] > 0 and limit[r] != UNLIMITED and start[r] + request[r] > limit[r]:
                self.over_share(job, pending, bound, start)
                return
        previous = self.ssn.pending.get(pending[0].uid)
        protected = protected_reason(self.ssn, job, request, previous.predicates if previous is not None else {})
        if protected is not None:
            self.ssn.set_pending(pending, protected)


class _Side:
    """The leaves under one victim side ``v`` seen from a reclaimer leaf (``side``: the reclaimer's side below
    their common ancestor), and those of them not known to fail ``_Reclaim.may_move_some`` (fixed once asked);
    ``caps``: ``_Reclaim.caps`` of ``v``."""

    __slots__ = ("caps", "leaves", "maybe_movable", "side", "v")

    def __init__(self, v: QueueInfo, side: QueueInfo, caps: tuple[int, int, int]) -> None:
        self.v, self.side, self.caps = v, side, caps
        self.leaves: list[QueueInfo] = []
        self.maybe_movable: list[QueueInfo] = []


class _Pool:
    """A victim queue in one search: its victim list's key, its side and the reclaimer's below their common
    ancestor, whether it gives, and its units (read when it is first ranked best)."""

    __slots__ = ("giving", "key", "side", "units", "v")

    def __init__(self, key: Hashable, v: QueueInfo, side: QueueInfo, giving: bool) -> None:
        self.key, self.v, self.side, self.giving = key, v, side, giving
        self.units: Iterator[VictimUnit] | None = None


_SEARCHES = "searches"
_REFUSED = "refused"


def _verdict(
    job: JobInfo, request: list[int], check_job: Callable[[JobInfo, list[int]], tuple[PendingCode, str] | None]
) -> str:
    """What ``try_job`` does with a job that is not awaiting evictions, at the opening state: ``_REFUSED`` by a job
    check, ``_SEARCHES`` (its queue stays within its bound with it), else the bound its queue would exceed. The
    same for every job of one leaf and one ``Session.job_class``."""
    leaf = job.queue
    assert leaf is not None
    refused = check_job(job, request)
    if refused is not None and not (refused[0] == "QueueOverLimit" and _limits_may_lift(leaf, request)):
        return _REFUSED
    if job.preemptible:
        return _SEARCHES if within(leaf, request, leaf.fair_share) else "fair share"
    return _SEARCHES if within(leaf, request, leaf.quota) else "deserved quota"


def _within_quota(held: list[int], request: list[int], side: QueueInfo) -> bool:
    """Whether ``side`` holding ``held`` stays within its deserved quota on every resource with ``request``."""
    return all(side.quota[r] == UNLIMITED or held[r] + request[r] <= side.quota[r] for r in range(3))


def _gives(v: QueueInfo, caps: tuple[int, int, int], left: list[int], guaranteed: bool) -> bool:
    """KAI's reclaim strategies for the victim side ``v`` holding ``left``: over its allocatable share ``caps`` on
    some resource (MaintainFairShare), or over its deserved quota on some resource while the reclaimer's side stays
    within its own on all (``guaranteed``; GuaranteeDeservedQuota)."""
    if (
        (caps[0] != UNLIMITED and left[0] > caps[0])
        or (caps[1] != UNLIMITED and left[1] > caps[1])
        or (caps[2] != UNLIMITED and left[2] > caps[2])
    ):
        return True
    return guaranteed and any(v.quota[r] != UNLIMITED and left[r] > v.quota[r] for r in range(3))


def _limits_may_lift(leaf: QueueInfo, request: list[int]) -> bool:
    """Whether evicting every preemptible pod of the other leaves below each ancestor whose limit ``request`` passes
    would bring it within that limit (KAI checks a reclaimer's queue limits inside the simulation, after its
    victims' release; a limit of the leaf itself, or one no such eviction can lift, refuses it up front)."""
    mine = [leaf.allocated[r] - leaf.allocated_np[r] for r in range(3)]
    for q in leaf.ancestry():
        for r in range(3):
            limit = q.limit[r]
            if limit == UNLIMITED or request[r] <= 0 or q.allocated[r] + request[r] <= limit:
                continue
            if q is leaf:
                return False
            others = q.allocated[r] - q.allocated_np[r] - mine[r]
            if q.allocated[r] - others + request[r] > limit:
                return False
    return True


def _settle(reclaim: _Reclaim, jobs: list[JobInfo]) -> bool:
    """What ``try_job`` would do for every job, in any order, when none of them would search at the opening state;
    False (and nothing done) otherwise.

    A job that ends before searching (waiting for its evictions, refused by a job check, or its queue past its
    bound with the job) changes no queue and no node, so every job sees the opening state whatever the order, and
    only the pending reasons of its own tasks change. The order would still decide where a reason first enters
    ``Session.pending`` (the order of the cycle's output): the shortcut is taken only when every task it may mark
    already has a reason there. Jobs with a topology constraint are left to the ordered run, as their job check
    places and removes pods to test a domain."""
    ssn = reclaim.ssn
    reasons = ssn.pending
    check_job = ssn.hooks.check_job
    marks: list[tuple[JobInfo, list[TaskInfo], str | None]] = []
    verdicts: dict[tuple[str, JobClass], str] = {}
    for job in jobs:
        leaf = job.queue
        assert leaf is not None
        if job.topology is not None:
            return False
        pending = ssn.pending_of(job)
        for task in pending:
            if task.uid not in reasons:
                return False
        if ssn.awaited.get(job.key, 0):
            marks.append((job, pending, None))
            continue
        job_class = ssn.job_class(job)
        key = (leaf.name, job_class) if job_class is not None else None
        verdict = verdicts.get(key) if key is not None else None
        if verdict is None:
            verdict = _verdict(job, ssn.job_request(job), check_job)
            if key is not None:
                verdicts[key] = verdict
        if verdict == _SEARCHES:
            return False
        if verdict != _REFUSED:
            marks.append((job, pending, verdict))
    for job, pending, bound in marks:
        if bound is None:
            awaiting(ssn, job)
        else:
            assert job.queue is not None
            reclaim.over_share(job, pending, bound, job.queue.allocated)
    return True


def _some_fit(q: QueueInfo, gpu: int, cpu: int) -> bool:
    """Whether the smallest GPU and the smallest CPU of the running preemptible pods of ``q`` are within ``gpu`` and
    ``cpu``."""
    gpu_ok = cpu_ok = False
    for job in q.jobs:
        if not job.preemptible:
            continue
        for t in job.tasks:
            if t.status == RUNNING:
                gpu_ok = gpu_ok or len(t.gpus) * t.gpu_portion <= gpu
                cpu_ok = cpu_ok or t.cpu <= cpu
                if gpu_ok and cpu_ok:
                    return True
    return False


def _bits(resources: Iterable[int]) -> int:
    """``resources`` (indices 0-2) as a bit set."""
    bits = 0
    for r in resources:
        bits |= 1 << r
    return bits


_RESOURCES_OF_BITS = tuple(tuple(r for r in range(3) if bits >> r & 1) for bits in range(8))
"""Per bit set of resources: its resources in order."""


def _resources_of(unit: VictimUnit) -> int:
    """The resources the unit's tasks hold (KAI's involved resources of a victim), as a bit set."""
    used = 0
    for task in unit.tasks:
        if task.gpus and task.gpu_portion:
            used |= 1
        if task.cpu:
            used |= 2
        if task.mem:
            used |= 4
    return used


def run(session: Session) -> None:
    jobs = [j for j in session.pending_jobs if j.queue is not None and session.pending_of(j)]
    if not jobs:
        return
    reclaim = _Reclaim(session)
    if _settle(reclaim, jobs):
        return
    order = JobsByQueue(session, jobs)
    over: tuple[JobClass, str] | None = None
    for job in order.in_order():
        if over is not None and order.followed and not session.awaited.get(job.key, 0):
            leaf = job.queue
            if leaf is not None and session.job_class(job) == over[0]:
                reclaim.over_share(job, session.pending_of(job), over[1], leaf.allocated)
                continue
        bound = reclaim.try_job(job)
        job_class = session.job_class(job) if bound is not None else None
        over = (job_class, bound) if job_class is not None and bound is not None else None
