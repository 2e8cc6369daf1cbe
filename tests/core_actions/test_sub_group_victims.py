"""Victims of a job with subgroups: surplus pods come from the subgroup most above its minMember each turn; a
simulation puts back what each subgroup below its minMember needs."""

from __future__ import annotations

from kai_stream.core.scheduler.actions._common.solver import _to_put_back
from kai_stream.core.scheduler.actions._common.victims import victim_units
from kai_stream.core.scheduler.framework.info import RELEASING, RUNNING, JobInfo, TaskInfo


def _job(groups: dict[str, tuple[int, int]], min_member: int = 1) -> JobInfo:
    """A running job with, per subgroup name, (minMember, running pods); pod i of a subgroup is created at i."""
    job = JobInfo(
        "ns/j",
        "ns",
        "j",
        "uid-j",
        "q",
        None,
        0,
        True,
        min_member,
        0.0,
        sub_groups=tuple((name, need) for name, (need, _) in groups.items()),
    )
    for name, (_, count) in groups.items():
        for i in range(count):
            job.tasks.append(
                TaskInfo(
                    f"uid-{name}-{i}",
                    "ns",
                    f"{name}-{i}",
                    job,
                    1000,
                    0,
                    0,
                    0,
                    0,
                    0,
                    {},
                    (),
                    (),
                    float(i),
                    status=RUNNING,
                    sub_group=name,
                )
            )
    return job


def _names(job: JobInfo, surplus_only: bool = False) -> list[list[str]]:
    return [[t.name for t in unit.tasks] for unit in victim_units(job, surplus_only)]


def test_one_surplus_pod_per_subgroup_then_the_core() -> None:
    units = _names(_job({"sub-0": (1, 2), "sub-1": (1, 2)}))
    assert units[:2] == [["sub-1-1"], ["sub-0-1"]]
    assert sorted(units[2]) == ["sub-0-0", "sub-1-0"]
    assert len(units) == 3


def test_highest_ratio_above_minimum_goes_first() -> None:
    units = _names(_job({"a": (2, 5), "b": (1, 3)}), surplus_only=True)
    # a: 5/2 vs b: 3/1 -> b; then a 5/2 vs b 2/1 -> a; then a 4/2 = b 2/1 -> the later name b; then a alone is above
    assert units == [["b-2"], ["a-4"], ["b-1"], ["a-3"], ["a-2"]]


def test_subgroups_at_their_minimum_give_no_surplus() -> None:
    job = _job({"sub-0": (2, 2), "sub-1": (1, 1)})
    assert _names(job, surplus_only=True) == []
    assert len(_names(job)) == 1


def test_put_back_gives_each_subgroup_below_its_minimum_what_it_needs() -> None:
    job = _job({"a": (1, 2), "b": (2, 3)})
    for t in job.tasks:
        t.status = RELEASING
    assert [t.name for t in _to_put_back(job, list(reversed(job.tasks)))] == ["a-0", "b-0", "b-1"]


def test_put_back_one_task_of_the_least_surplus_subgroup_when_none_is_below() -> None:
    job = _job({"a": (1, 3), "b": (1, 4)})
    evicted = [t for t in job.tasks if t.name in ("a-2", "b-3", "b-2")]
    for t in evicted:
        t.status = RELEASING
    # active: a 2/1, b 2/1 -> the earlier name a
    assert [t.name for t in _to_put_back(job, evicted)] == ["a-2"]
