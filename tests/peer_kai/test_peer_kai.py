"""The KAI side-by-side harness without building or running KAI: the workload it submits, the figures it computes
from pod records, the scenario outcomes it compares, the command lines it parses and the tables it prints."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from benchmarks.peer_kai import agree, run, workload
from benchmarks.peer_kai.harness import RunResult
from benchmarks.peer_kai.outcomes import differences, outcomes, per_queue
from benchmarks.peer_kai.procstat import Usage, cpu_seconds, peak_rss_kib
from benchmarks.peer_kai.records import PodLedger, figures, figures_by_phase, percentile


def test_workload_mix_phases_and_queues() -> None:
    spec = workload.WorkloadSpec(nodes=10, pods=100, departments=2, queues_per_department=3)
    load = workload.build(spec)
    assert load.pod_count() == 100
    assert load.pod_count("steady") + load.pod_count("burst") == 100
    assert abs(load.pod_count("steady") - 50) < spec.gang_size
    assert load.gpu_demand() == pytest.approx(75.0, abs=2.0)
    gangs = [job for job in load.jobs if job.podgroup is not None]
    assert gangs and all(len(job.pods) == spec.gang_size for job in gangs)
    for job in gangs:
        assert job.podgroup is not None
        group = job.podgroup["metadata"]["name"]
        assert {p["metadata"]["annotations"]["pod-group-name"] for p in job.pods} == {group}
    fractions = {p["metadata"]["annotations"].get("gpu-fraction") for j in load.jobs for p in j.pods}
    assert {"0.5", "0.25"} <= fractions
    names = {q["metadata"]["name"]: q for q in load.queues}
    assert len(names) == 2 + 6
    assert names["dept-2-q3"]["spec"]["parentQueue"] == "dept-2"
    assert names["dept-1"]["spec"]["resources"]["gpu"]["quota"] == 40
    assert names["dept-1-q1"]["spec"]["resources"]["gpu"]["quota"] == 13
    used = {p["metadata"]["labels"][workload.QUEUE_LABEL] for j in load.jobs for p in j.pods}
    assert used == set(workload.leaf_queues(spec))
    assert load == workload.build(spec)


def test_workload_never_splits_a_gang() -> None:
    load = workload.build(workload.WorkloadSpec(nodes=1, pods=19))
    assert load.pod_count() == 19
    assert all(len(job.pods) in (1, 4) for job in load.jobs)
    with pytest.raises(ValueError):
        workload.WorkloadSpec(nodes=0, pods=1)


def _pod(name: str, node: str | None = None) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {}}


def test_ledger_figures_from_pod_records() -> None:
    ledger = PodLedger()
    for i in range(4):
        ledger.expect(f"s{i}", "steady")
    ledger.expect("b0", "burst")
    ledger.expect("b1", "burst")
    for i, name in enumerate(["s0", "s1", "s2", "s3"]):
        ledger.created(name, 10.0 + i)
    ledger.created("b0", 20.0)
    ledger.created("b1", 20.0)
    ledger.observe("ADDED", _pod("s0"), 10.1)
    for name, at in (("s0", 10.2), ("s1", 11.4), ("s2", 12.1), ("s3", 14.0), ("b0", 21.0)):
        ledger.observe("MODIFIED", _pod(name, "n1"), at)
    ledger.observe("MODIFIED", _pod("s0", "n2"), 30.0)
    ledger.observe("MODIFIED", _pod("stranger", "n1"), 11.0)
    ledger.observe("DELETED", _pod("b1"), 25.0)
    assert ledger.pods["s0"].node == "n1" and ledger.pods["s0"].bound == 10.2
    steady = figures(r for r in ledger.pods.values() if r.phase == "steady")
    assert steady.bound == 4 and steady.pending == 0
    assert steady.time_to_place_s == pytest.approx(4.0)
    assert steady.pods_per_s == pytest.approx(1.0)
    assert steady.p50_ms == pytest.approx(200.0)
    assert steady.p99_ms == pytest.approx(1000.0)
    every = figures_by_phase(ledger)
    assert list(every) == ["all", "steady", "burst"]
    assert every["all"].time_to_place_s is None
    assert every["burst"].evicted == 1 and every["burst"].pending == 0 and every["burst"].bound == 1
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_usage_of_this_process_is_positive() -> None:
    import os

    assert cpu_seconds(os.getpid()) > 0
    assert peak_rss_kib(os.getpid()) > 1024


def test_comparison_rows_and_ratios() -> None:
    base = figures([])
    results = [
        RunResult("kai-stream", "processor", {"all": base, "burst": base},
                  {"processor": Usage(2.0, 100.0), "broker": Usage(1.0, 20.0)}, 20.0),
        RunResult("KAI Scheduler", "scheduler", {"all": base},
                  {"scheduler": Usage(4.0, 80.0), "binder": Usage(4.0, 70.0)}, 2.0),
    ]
    rows = {label: values for label, values, _ in run.rows(results)}
    assert rows["scheduler CPU-s"] == [2.0, 4.0]
    assert rows["all components CPU-s"] == [3.0, 8.0]
    assert rows["all components peak RSS (MiB)"] == [120.0, 150.0]
    assert rows["pods/s, burst"] == [None, None]
    assert run._ratio(2.0, 4.0) == "0.50×"
    assert run._ratio(None, 4.0) == "-"
    assert run.table(results, "t").row_count == len(rows)


SCENARIO: list[dict[str, Any]] = [
    {"kind": "Queue", "metadata": {"name": "qa"}, "spec": {}},
    {"kind": "Queue", "metadata": {"name": "dept"}, "spec": {}},
    {"kind": "Queue", "metadata": {"name": "qb"}, "spec": {"parentQueue": "dept"}},
    {"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}},
    {"kind": "PodGroup", "metadata": {"name": "g", "namespace": "ml"}, "spec": {"queue": "qb"}},
    {"kind": "Pod", "metadata": {"name": "p1", "namespace": "ml", "labels": {"kai.scheduler/queue": "qa"}},
     "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}},
    {"kind": "Pod", "metadata": {"name": "p2", "namespace": "ml", "annotations": {"pod-group-name": "g"}},
     "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "mine"}]}},
    {"kind": "Pod", "metadata": {"name": "p3", "namespace": "ml", "labels": {"kai.scheduler/queue": "qa"}},
     "spec": {"schedulerName": "kai-scheduler", "containers": []}},
    {"kind": "Pod", "metadata": {"name": "legacy", "namespace": "ml"}, "spec": {"schedulerName": "default"}},
]


def test_scenario_outcomes_and_differences() -> None:
    live: dict[str, dict[str, Any]] = {"ml/p1": {"metadata": {}, "spec": {"nodeName": "n1"}},
            "ml/p2": {"metadata": {"deletionTimestamp": "now"}, "spec": {"nodeName": "n1"}},
            "ml/p3": {"metadata": {}, "spec": {}}}
    ours = outcomes(SCENARIO, live)
    assert {k: (o.queue, o.state, o.node) for k, o in ours.items()} == {
        "ml/p1": ("qa", "bound", "n1"), "ml/p2": ("qb", "evicted", None), "ml/p3": ("qa", "pending", None)}
    assert per_queue(ours)["qa"] == {"bound": 1, "pending": 1}
    theirs = outcomes(SCENARIO, {**live, "ml/p1": {"metadata": {}, "spec": {"nodeName": "n2"}}})
    assert differences(ours, theirs) == []
    moved = differences(ours, theirs, nodes=True)
    assert [d.pod for d in moved] == ["ml/p1"]
    assert moved[0].describe() == "ml/p1: bound on n1 vs bound on n2"


def test_scenarios_served_as_a_cluster_would() -> None:
    served = agree.under_parent(agree.as_served(SCENARIO))
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in served}
    assert by_name[("Pod", "p1")]["spec"]["containers"] == [{"image": "busybox", "name": "c"}]
    assert by_name[("Pod", "p2")]["spec"]["containers"][0]["image"] == "mine"
    node = by_name[("Node", "n1")]["status"]
    assert node["allocatable"] == {"pods": "110", "nvidia.com/gpu": "2"} == node["capacity"]
    assert by_name[("Node", "n1")]["metadata"]["labels"][agree.HOSTNAME_LABEL] == "n1"
    assert by_name[("Queue", "qa")]["spec"]["parentQueue"] == agree.DEFAULT_PARENT
    assert "parentQueue" not in by_name[("Queue", "dept")]["spec"]
    assert by_name[("Queue", agree.DEFAULT_PARENT)]["spec"]["resources"]["gpu"]["quota"] == -1
    leveled = [o for o in SCENARIO if o["kind"] == "Queue" and o["metadata"]["name"] != "qa"]
    assert agree.under_parent(leveled) == leveled


def test_command_lines_parse() -> None:
    runner = CliRunner()
    answer = runner.invoke(run.app, ["--nodes", "0", "--pods", "10"])
    assert answer.exit_code != 0 and "at least 1" in str(answer.exception)
    answer = runner.invoke(run.app, ["--rate", "0"])
    assert answer.exit_code == 2
    assert "--pods" in runner.invoke(run.app, ["--help"]).output
    assert "--quiet" in runner.invoke(agree.app, ["--help"]).output
