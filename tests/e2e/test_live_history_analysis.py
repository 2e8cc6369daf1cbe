"""What-if and analyze on a history `kai-stream run` recorded (the embedded pipeline: broker, simulated cluster,
connector, processor, binder, history sink), where every event carries its own wall-clock time.

The scenario: qb's four one-GPU pods run on n1/n2 when the log starts, qa's two pending pods (quota 2) reclaim
two of them; a CPU-only pod of qc runs from the start and finishes after 2 s, a1 finishes 2 s after its bind;
qc's gang ``big`` (two 4-GPU pods, minMember 2) never fits. The gang is not qa's: a pending job first in its queue
ranks the queue in KAI's reclaim simulation (``actions/common/action.go`` ``GetJobsToAllocate``), so in qa it would
rank qa after qb there and a1 would reclaim only while b3 is still releasing (a live cycle can see that; the what-if
engine, which removes an evicted pod at once, cannot). Each assertion names the bug it guards against.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_stream.analytics import summarize
from kai_stream.cli import _register, app
from kai_stream.core.events import EvictionRequested
from kai_stream.history.reader import History, read_history
from kai_stream.replay.whatif import load_whatif, run_whatif
from tests.cli_main import kai_process

_NODE = """
apiVersion: v1
kind: Node
metadata: {{name: {name}}}
status: {{allocatable: {{nvidia.com/gpu: "2", cpu: "64", memory: 256Gi}}}}
"""
_QUEUE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {name}}}
spec:
  resources:
    gpu: {{quota: {quota}, overQuotaWeight: 1, limit: -1}}
"""
_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  labels: {{kai.scheduler/queue: {queue}}}
  annotations: {{{annotations}}}
spec:
  schedulerName: kai-scheduler
  priorityClassName: train{node}
  containers: [{{name: c, resources: {{limits: {{{limits}}}}}}}]
"""
_GANG = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: big, namespace: ml}
spec: {minMember: 2, queue: qc}
"""


def _pod(name: str, queue: str, *, gpus: int = 1, node: str = "", annotations: str = "") -> str:
    limits = f"nvidia.com/gpu: {gpus}" if gpus else "cpu: 1"
    where = f"\n  nodeName: {node}" if node else ""
    return _POD.format(name=name, queue=queue, annotations=annotations, node=where, limits=limits)


SCENARIO = "---".join(
    [
        _NODE.format(name="n1"),
        _NODE.format(name="n2"),
        _QUEUE.format(name="qa", quota=2),
        _QUEUE.format(name="qb", quota=2),
        _QUEUE.format(name="qc", quota=0),
        *(_pod(f"b{i}", "qb", node=f"n{(i + 1) // 2}") for i in range(1, 5)),
        _pod("c1", "qc", gpus=0, node="n1", annotations='kai.scheduler/duration-seconds: "2"'),
        _pod("a1", "qa", annotations='kai.scheduler/duration-seconds: "2"'),
        _pod("a2", "qa"),
        _GANG,
        *(_pod(f"big-{i}", "qc", gpus=4, annotations="pod-group-name: big") for i in (1, 2)),
    ]
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The history directory of a 40 s `kai-stream run` of SCENARIO (the processor needs ~15 s to start under load)."""
    root = tmp_path_factory.mktemp("live")
    (root / "scenario.yaml").write_text(SCENARIO)
    argv = ["run", "--scenario", "scenario.yaml", "--resubmit", "0", "--duration", "40", "--termination-grace", "1"]
    kai_process(argv, root, 300)
    return root / ".kai-stream" / "history"


def _recorded(history: History) -> list[EvictionRequested]:
    return [d for d in history.pools["default"].decisions if isinstance(d, EvictionRequested)]


def test_whatif_baseline_reproduces_the_live_runs_evictions(live: Path, tmp_path: Path) -> None:
    """The baseline re-run (recorded config, cut at the recorded cycles, evictions and finishes emulated) evicts what
    the live run evicted, for the same reclaimers, and qa gets its two GPUs; the allocate-only what-if evicts nothing
    and leaves a2 pending. Both of qa's pods reclaim in the first cycle that sees them (qa's queue is ranked by its own
    pods), so where the live run's later cycles fell changes nothing here."""
    history = read_history(live)
    recorded = _recorded(history)
    assert Counter(d.action for d in recorded) == {"reclaim": 2}, "the live run should have reclaimed twice"
    other = tmp_path / "allocate-only.yaml"
    other.write_text("actions: [allocate]\n")
    pool = run_whatif(history, load_whatif(other)).pools["default"]
    baseline = {o.key: o for o in pool.baseline.values()}
    whatif = {o.key: o for o in pool.whatif.values()}
    evicted = {key: (o.evictions[0][1], o.evictions[0][2]) for key, o in baseline.items() if o.evictions}
    assert evicted == {f"{d.namespace}/{d.name}": (d.action, d.preemptor) for d in recorded}
    assert pool.baseline_queues["qb"].evictions == 2 and pool.whatif_queues["qb"].evictions == 0
    assert baseline["ml/a1"].status == "Succeeded" and baseline["ml/a2"].status == "Running"
    assert whatif["ml/a2"].status == "Pending"
    binds = {f"{d.namespace}/{d.name}": d.node for d in history.pools["default"].decisions if d.type == "BindRequested"}
    assert baseline["ml/a1"].node == binds["ml/a1"]


def test_whatif_cli_on_the_live_history(live: Path, tmp_path: Path) -> None:
    other = tmp_path / "allocate-only.yaml"
    other.write_text("actions: [allocate]\n")
    _register()
    result = CliRunner().invoke(app, ["replay", "--from-history", str(live), "--config", str(other), "--json"])
    assert result.exit_code == 0, result.output
    pool = json.loads(result.output)["pools"]["default"]
    assert pool["baseline"]["qb"]["evictions"] == 2 and pool["whatif"]["qb"]["evictions"] == 0


def test_analyze_the_live_history(live: Path) -> None:
    summary = summarize(live)
    queues = {q["queue"]: q for q in summary.queues}
    assert "(none)" not in queues, "pods running when the log starts belong to their queue label"
    assert queues["qb"]["avg_allocated_gpus"] > 1.0
    assert queues["qb"]["evictions_suffered"] == {"reclaim": 2} and queues["qa"]["evictions_caused"] == {"reclaim": 2}
    cluster = summary.cluster
    assert (cluster["pods"], cluster["pods_never_bound"]) == (9, 2)
    assert cluster["jobs"] == 8, "the gang's two never-bound pods are one job"
    assert cluster["jobs_completed"] == 2, "a1 and c1 (running from the start) finished"
    assert queues["qc"]["jobs_completed"] == 1
    for name in ("qa", "qb"):
        assert queues[name]["avg_fair_share_gpus"] is not None, f"the processor records {name}'s fair share"
    assert not [n for n in summary.notes if "FairShareRecorded" in n]
