"""What-if keeps what users removed and re-derives what the scheduler caused: a pod (and its PodGroup) deleted by
its user stays deleted under any policy; the removals of pods and PodGroups that the recorded run evicted or
finished are not replayed, so a job that runs later under the other policy is not left without its PodGroup
(such a job is never placed, see stalegangeviction's docs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_manifests import NODE, pod, queue

from kai_stream.core.config import SchedulerConfig, parse_config
from kai_stream.core.events import ObservedEvent, PodGroupRemoved, PodObserved, PodRemoved
from kai_stream.core.manifests import load_scenario
from kai_stream.history.export import write_history
from kai_stream.history.reader import read_history
from kai_stream.replay.engine import run_engine
from kai_stream.replay.whatif import WhatIfSpec, observed_only, run_whatif
from tests.trace.itp_slice import simulate_itp_slice

GROUP = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: g, namespace: ml}
spec: {minMember: 1, queue: qa}
"""


def _grouped(name: str) -> str:
    return str(pod(name, "qa")).replace("labels:", "annotations: {pod-group-name: g}\n  labels:", 1)


def test_a_users_deletions_stay_and_the_schedulers_are_re_derived(tmp_path: Path) -> None:
    """Four 100 s pods fill the 4-GPU node at t=0; pod ml/x (PodGroup g) comes at t=10 and waits; its user deletes
    it and the group at t=50. The four pods finish at t=100 and are removed: that followed from the scheduler's
    binds."""
    manifests = [NODE, queue("qa", 4), *(pod(f"p{i}", "qa", 100) for i in range(4)), GROUP, _grouped("x")]
    events: list[ObservedEvent] = [
        e.model_copy(update={"ts": 10.0}) if isinstance(e, PodObserved) and e.pod.name == "x" else e
        for e in load_scenario("---".join(manifests))
    ]
    x = next(e.pod for e in events if isinstance(e, PodObserved) and e.pod.name == "x")
    events += [
        PodRemoved(event_id="user-x", ts=50.0, namespace="ml", name="x", uid=x.uid),
        PodGroupRemoved(event_id="user-g", ts=50.0, namespace="ml", name="g"),
    ]
    run = run_engine(events, SchedulerConfig())
    write_history(tmp_path / "h", [run.log])
    log = read_history(tmp_path / "h").pools["default"]
    kept = observed_only(log)
    assert any(isinstance(e, PodRemoved) and e.uid == x.uid for e in kept), "the user's deletion is kept"
    assert any(isinstance(e, PodGroupRemoved) for e in kept), "so is the removal of the group it deleted"
    finished = {e.pod.uid for e in log.events if isinstance(e, PodObserved) and e.pod.phase == "Succeeded"}
    assert len(finished) == 4
    assert not [e for e in kept if isinstance(e, PodRemoved) and e.uid in finished], "finished pods' removals go"
    pool = run_whatif(read_history(tmp_path / "h"), WhatIfSpec(config=SchedulerConfig())).pools["default"]
    outcome = pool.baseline[x.uid]
    assert outcome.bound_at is None and outcome.status == "Pending", "x was deleted before it could run"


@pytest.fixture(scope="module")
def itp_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    history, stats = simulate_itp_slice(tmp_path_factory.mktemp("itp"))
    assert stats.unfinished_pods == 0
    return history


def test_recorded_pod_group_removals_do_not_strand_the_other_policys_jobs(itp_history: Path) -> None:
    """The trace run removes a job's PodGroup with its last pod; replaying those removals left pods that the
    other policy ran later without their group, never placed (4 pending at the end of the baseline, 18 without
    reclaim, before the fix). Every pod of the trace finished in the recorded run, so it does in both here."""
    history = read_history(itp_history)
    assert any(isinstance(e, PodGroupRemoved) for e in history.pools["default"].events)
    report = run_whatif(history, WhatIfSpec(config=parse_config({"actions": ["allocate"]}, "no reclaim")))
    pool = report.pools["default"]
    assert pool.baseline and pool.whatif
    for side in (pool.baseline, pool.whatif):
        assert [o.key for o in side.values() if o.bound_at is None] == []
    assert sum(len(o.evictions) for o in pool.whatif.values()) == 0
    assert sum(len(o.evictions) for o in pool.baseline.values()) > 0
