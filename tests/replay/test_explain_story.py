"""`explain` from the log alone: a reclaimed pod (who took its GPUs, with the queues' fair shares then) and a
pod pending on a full cluster (its reason, times, and the queues' standing)."""

from __future__ import annotations

from pathlib import Path

import orjson
from replay_manifests import NODE, pod, queue
from typer.testing import CliRunner

from kai_stream.cli import _register, app
from kai_stream.core.config import SchedulerConfig, parse_config
from kai_stream.core.events import ObservedEvent, PodObserved
from kai_stream.core.manifests import load_scenario
from kai_stream.explain import explain_pod
from kai_stream.history.export import write_history
from kai_stream.history.reader import read_history
from kai_stream.replay.engine import run_engine


def _events(
    early: list[str], late: list[str], b_quota: int = 2, late_ts: float = 10.0, nodes: str = NODE
) -> list[ObservedEvent]:
    base = [nodes, queue("team-a", 2), queue("team-b", b_quota)]
    first = load_scenario("---".join(base + early), ts=0.0)
    then = [e for e in load_scenario("---".join(base + late), ts=late_ts) if isinstance(e, PodObserved)]
    return first + then


def _history(tmp_path: Path, events: list[ObservedEvent], config: SchedulerConfig | None = None) -> Path:
    directory = tmp_path / "history"
    write_history(directory, [run_engine(events, config or SchedulerConfig()).log])
    return directory


def test_explain_reclaimed_pod(tmp_path: Path) -> None:
    # team-b fills the 4 GPUs over its quota of 2; team-a (quota 2) arrives at t=10 and reclaims two of them
    directory = _history(tmp_path, _events([pod(f"b-{i}", "team-b") for i in range(4)], [pod("a-0", "team-a")]))
    stories = explain_pod(read_history(directory), "ml/b-0") + explain_pod(read_history(directory), "ml/b-1")
    evicted = [s for s in stories if s.status == "Evicted"]
    assert len(evicted) == 1
    story = evicted[0]
    kinds = [step.kind for step in story.steps]
    assert kinds == ["Arrived", "BindDecided", "Bound", "EvictionDecided", "Evicted", "Removed"]
    eviction = story.steps[3]
    assert eviction.ts == 10.0 and eviction.data["action"] == "reclaim"
    assert eviction.data["preemptor"] == "ml/a-0" and eviction.data["preemptor_queue"] == "team-a"
    assert eviction.standing is not None
    victim, reclaimer = eviction.standing["team-b"], eviction.standing["team-a"]
    assert (victim.fair_share_gpu, victim.allocated_gpu, victim.over_fair_share) == (3.0, 4.0, True)
    assert (reclaimer.fair_share_gpu, reclaimer.allocated_gpu) == (1.0, 0.0)
    details = eviction.data["details"]  # what the core recorded agrees with what explain recomputed
    assert float(details["victim_gpu_fair_share"]) == victim.fair_share_gpu
    assert float(details["victim_gpu_allocated"]) == victim.allocated_gpu

    _register()
    result = CliRunner().invoke(app, ["explain", story.pod, "--from-history", str(directory), "--json"])
    assert result.exit_code == 0, result.output
    (doc,) = orjson.loads(result.output)
    assert doc["status"] == "Evicted" and doc["steps"][3]["data"]["preemptor"] == "ml/a-0"
    assert doc["steps"][3]["queues"]["team-b"]["over_fair_share"] is True
    human = CliRunner().invoke(app, ["explain", story.pod, "--from-history", str(directory)], env={"COLUMNS": "200"})
    assert human.exit_code == 0 and "reclaim: eviction decided for ml/a-0 (queue team-a)" in human.output
    assert "over fair share" in human.output


def test_explain_pod_pending_on_full_cluster(tmp_path: Path) -> None:
    # team-b (quota 4) runs 4 non-preemptible pods within its quota: the cluster is full and nothing can go
    early = [pod(f"b-{i}", "team-b", priority_class="build") for i in range(4)]
    directory = _history(tmp_path, _events(early, [pod("a-0", "team-a")], b_quota=4))
    (story,) = explain_pod(read_history(directory), "a-0")
    assert story.status == "Pending"
    pending = [s for s in story.steps if s.kind == "Pending"]
    assert pending and pending[0].ts == 10.0
    # the one node has no free GPU; team-b is within its quota, so no queue is to blame and nothing is reclaimed
    assert [(p.data["code"], p.data["predicates"]) for p in pending] == [("NoNodeFits", {"InsufficientGPU": 1})]
    assert pending[0].standing is not None
    assert pending[0].standing["team-b"].allocated_gpu == 4.0
    assert story.blocking_queues() == []
    assert story.steps[0].kind == "Arrived" and story.steps[0].ts == 10.0

    _register()
    result = CliRunner().invoke(app, ["explain", "ml/a-0", "--from-history", str(directory)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "pending: NoNodeFits: no node fits the pod (InsufficientGPU: 1)" in result.output
    assert "[InsufficientGPU on 1 node(s)]" in result.output
    assert "status: Pending" in result.output and "over their fair share" not in result.output
    missing = CliRunner().invoke(app, ["explain", "ml/nope", "--from-history", str(directory)])
    assert missing.exit_code == 1 and "no pod" in missing.output


TWO_NODES = "---".join(
    f"""
apiVersion: v1
kind: Node
metadata: {{name: node-{i}}}
status: {{allocatable: {{nvidia.com/gpu: "2", cpu: "32", memory: 128Gi}}}}
"""
    for i in (1, 2)
)


def test_explain_pending_pod_names_the_predicates_and_the_queue_holding_the_gpus(tmp_path: Path) -> None:
    # reclaim is off: team-b keeps 4 GPUs over its quota of 2 on both nodes; team-a's pod finds no node
    early = [pod(f"b-{i}", "team-b") for i in range(4)]
    events = _events(early, [pod("a-0", "team-a")], nodes=TWO_NODES)
    directory = _history(tmp_path, events, parse_config({"actions": ["allocate"]}))
    (story,) = explain_pod(read_history(directory), "ml/a-0")
    assert story.status == "Pending"
    (pending,) = [s for s in story.steps if s.kind == "Pending"]
    assert (pending.data["action"], pending.data["code"]) == ("allocate", "NoNodeFits")
    assert pending.data["predicates"] == {"InsufficientGPU": 2}
    assert pending.data["reason"] == "no node fits the pod (InsufficientGPU: 2)"
    assert pending.standing is not None
    b = pending.standing["team-b"]
    assert (b.deserved_gpu, b.fair_share_gpu, b.allocated_gpu, b.over_fair_share) == (2.0, 3.0, 4.0, True)
    assert story.blocking_queues() == ["team-b"]

    _register()
    human = CliRunner().invoke(app, ["explain", "ml/a-0", "--from-history", str(directory)], env={"COLUMNS": "200"})
    assert human.exit_code == 0, human.output
    assert "pending: NoNodeFits: no node fits the pod (InsufficientGPU: 2) [InsufficientGPU on 2 node(s)]" in (
        " ".join(human.output.split())
    )
    assert "status: Pending; queues over their fair share: team-b" in human.output
    as_json = CliRunner().invoke(app, ["explain", "ml/a-0", "--from-history", str(directory), "--json"])
    (doc,) = orjson.loads(as_json.output)
    assert doc["blocking_queues"] == ["team-b"]
    assert doc["steps"][1]["data"]["predicates"] == {"InsufficientGPU": 2}
    assert doc["steps"][1]["queues"]["team-b"]["over_fair_share"] is True


def test_explain_pending_shows_the_queues_as_its_cycle_left_them(tmp_path: Path) -> None:
    # team-b holds the 4 GPUs over its quota of 2; a-0, a-1, a-2 (team-a, fair share 2) arrive together at t=10:
    # the cycle reclaims 2 GPUs for two of them and leaves the third pending because team-a then holds 2. Its
    # table must show those 2 (the pending reasons are written after the cycle's placements; the table from
    # before the cycle showed 0, contradicting the reason)
    arrivals = [pod(f"a-{i}", "team-a") for i in range(3)]
    directory = _history(tmp_path, _events([pod(f"b-{i}", "team-b") for i in range(4)], arrivals))
    history = read_history(directory)
    (story,) = [s for i in range(3) for s in explain_pod(history, f"ml/a-{i}") if s.status == "Pending"]
    (pending,) = [s for s in story.steps if s.kind == "Pending"]
    assert pending.data["code"] == "NotEnoughOverQuotaShare" and "it holds 2 + the job's 1" in pending.data["reason"]
    assert pending.standing is not None
    team_a = pending.standing["team-a"]
    assert (team_a.fair_share_gpu, team_a.allocated_gpu) == (2.0, 2.0)
