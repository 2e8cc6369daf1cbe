"""The ported KAI tests as API objects (what agree.py applies) and kai-stream's created→bound time hop by hop
(what run.py prints), without a cluster or a broker."""

from __future__ import annotations

import re
from dataclasses import dataclass

from benchmarks.peer_kai import ported
from benchmarks.peer_kai.records import PodLedger
from benchmarks.peer_kai.stages import HOPS, stage_figures, trails
from kai_stream.core.events import PodBound, PodObserved, PodSpec, dumps
from kai_stream.core.manifests import object_to_events
from tests.binder.builders import bind
from tests.kai_builders import job_events
from tests.kai_ported.kai_harness import NOW, load_cases

DNS = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def test_every_expressible_case_reads_back_as_the_same_cluster() -> None:
    chosen = ported.cases()
    assert len(chosen) > 50
    for _, case in chosen:
        objs = ported.objects(case)
        assert all(DNS.match(o["metadata"]["name"]) for o in objs), case.id
        observed = [e for o in objs for e in object_to_events(o, ts=0.0) if isinstance(e, PodObserved)]
        expected = [e.pod for e in job_events(case.topology, NOW) if isinstance(e, PodObserved)]
        assert [(p.name, p.node_name, p.requests.gpu_milli) for p in (e.pod for e in observed)] == [
            (ported.dns(p.name), ported.dns(p.node_name) if p.node_name else None, p.requests.gpu_milli)
            for p in expected], case.id
        assert {p["spec"]["priorityClassName"] for p in objs if p["kind"] == "Pod"} <= set(
            ported.PRIORITY_CLASSES.values())


def test_cases_the_api_server_cannot_express_are_named() -> None:
    reasons = {ported.expressible(case) for case in load_cases()} - {None}
    assert any(r and "running GPU fraction" in r for r in reasons)
    assert any(r and "RequiredGpuMemory" in r for r in reasons)


@dataclass
class _Rec:
    value: bytes
    timestamp: int


def _pod(name: str) -> PodSpec:
    return PodSpec(namespace="ns", name=name, uid=f"u-{name}", queue="q")


def test_stage_figures_split_created_to_bound_by_hop() -> None:
    ledger = PodLedger()
    ledger.expect("a", "burst")
    ledger.expect("other", "burst")
    ledger.created("a", 10.0)
    ledger.observe("MODIFIED", {"metadata": {"name": "a"}, "spec": {"nodeName": "n1"}}, 10.9)
    decided = bind({"metadata": {"name": "a", "namespace": "ns", "uid": "u-a"}}, "n1")
    records = [
        _Rec(dumps(PodObserved(event_id="e2", ts=0.0, pod=_pod("a"))), 1_100_200),
        _Rec(dumps(PodObserved(event_id="e1", ts=0.0, pod=_pod("a"))), 1_100_100),
        _Rec(dumps(decided), 1_100_400),
        _Rec(dumps(PodBound(event_id="o", ts=0.0, decision_id=decided.decision_id, namespace="ns", name="a",
                            uid="u-a", node="n1")), 1_100_800),
        _Rec(dumps(PodObserved(event_id="e3", ts=0.0, pod=_pod("stranger"))), 1_100_000),
    ]
    found = trails(records, {"a", "other"})
    assert set(found) == {"a"}
    figures = stage_figures(ledger, found, wall_offset=1090.0)
    burst = figures["burst"]
    assert list(burst) == list(HOPS)
    assert [round(burst[h].p50_ms or 0) for h in HOPS] == [100, 300, 400, 100]
    assert all(burst[h].pods == 1 for h in HOPS)
    assert figures["all"] == burst
