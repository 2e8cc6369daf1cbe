"""`kai_stream.invariants` on hand-made logs: each invariant holds on a clean sequence and names the record that
breaks it once the violation is injected."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from kai_stream.core.events import (
    BindRequested,
    ClusterEvent,
    Decision,
    EvictionRequested,
    NodeObserved,
    NodeSpec,
    PodBound,
    PodEvicted,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodPending,
    PodPipelined,
    PodRemoved,
    PodSpec,
    Resources,
    chain,
    stable_id,
)
from kai_stream.history.reader import History, PoolLog
from kai_stream.invariants import (
    DECISIONS_TOPIC,
    EVENTS_TOPIC,
    InvariantReport,
    Position,
    check_history,
    check_records,
    pool_records,
)

GiB = 1 << 30


class Log:
    """A pool's log written in order: events get the next cluster-events offset, decisions the next decisions
    offset and the last event's offset as ``input_offset``."""

    def __init__(self) -> None:
        self.events: list[tuple[int, ClusterEvent]] = []
        self.decisions: list[Decision] = []
        self.pods: dict[str, PodSpec] = {}

    @property
    def at(self) -> int:
        return len(self.events) - 1

    def event(self, make: Callable[..., ClusterEvent], **fields: Any) -> Log:
        ts = float(len(self.events))
        self.events.append((len(self.events), make(event_id=f"e{len(self.events)}", ts=ts, **fields)))
        return self

    def node(self, name: str, gpus: int = 2, cpu: int = 8000, memory: int = 64 * GiB) -> Log:
        spec = NodeSpec(name=name, allocatable=Resources(gpu_milli=gpus * 1000, cpu_milli=cpu, memory=memory),
                        gpu_memory_mib=80_000)
        return self.event(NodeObserved, node=spec)

    def pod(self, name: str, **fields: Any) -> Log:
        old = self.pods.get(name)
        if old is None:
            base: dict[str, Any] = {"namespace": "ns", "name": name, "uid": f"uid-{name}", "queue": "q",
                                    "requests": Resources(gpu_milli=1000, cpu_milli=1000, memory=GiB)}
            spec = PodSpec(**(base | fields))
        else:
            spec = old.model_copy(update=fields)
        self.pods[name] = spec
        return self.event(PodObserved, pod=spec)

    def group(self, name: str, min_member: int) -> Log:
        return self.event(PodGroupObserved, pod_group=PodGroupSpec(namespace="ns", name=name, queue="q",
                                                                   min_member=min_member))

    def _outcome(self, name: str, kind: str) -> dict[str, Any]:
        uid = f"uid-{name}"
        decision = next(d for d in reversed(self.decisions) if d.uid == uid)
        return {"decision_id": decision.decision_id, "namespace": "ns", "name": name, "uid": uid}

    def bound(self, name: str, node: str, gpus: tuple[int, ...] = (), already: bool = False) -> Log:
        return self.event(PodBound, node=node, gpu_indices=gpus, already=already, **self._outcome(name, "PodBound"))

    def evicted(self, name: str) -> Log:
        fields = self._outcome(name, "PodEvicted") if any(d.uid == f"uid-{name}" for d in self.decisions) else {
            "decision_id": "none", "namespace": "ns", "name": name, "uid": f"uid-{name}"}
        return self.event(PodEvicted, **fields)

    def removed(self, name: str) -> Log:
        return self.event(PodRemoved, namespace="ns", name=name, uid=f"uid-{name}")

    def decide(self, make: Callable[..., Decision], name: str, *, job: str | None = None, **fields: Any) -> Log:
        uid = f"uid-{name}"
        common: dict[str, Any] = {
            "decision_id": stable_id("p", str(self.at), uid, make.__name__), "ts": float(self.at),
            "input_offset": self.at, "config_hash": "c", "code_version": "t", "action": "allocate",
            "namespace": "ns", "name": name, "uid": uid, "job": f"ns/{job or name}", "queue": "q",
        }
        self.decisions.append(make(**(common | fields)))
        return self

    def bind(self, name: str, node: str, gpus: tuple[int, ...] = (0,), **kw: Any) -> Log:
        return self.decide(BindRequested, name, node=node, gpu_indices=gpus, **kw)

    def pipeline(self, name: str, node: str, gpus: tuple[int, ...] = (0,), **kw: Any) -> Log:
        return self.decide(PodPipelined, name, node=node, gpu_indices=gpus, **kw)

    def evict(self, name: str, **kw: Any) -> Log:
        return self.decide(EvictionRequested, name, preemptor="ns/other", **(kw | {"action": "reclaim"}))

    def pending(self, name: str, **kw: Any) -> Log:
        return self.decide(PodPending, name, **({"code": "NoNodeFits"} | kw))

    def pool_log(self) -> PoolLog:
        linked, _ = chain(self.decisions, "")
        return PoolLog(
            "default", 0, events=[e for _, e in self.events], offsets=[o for o, _ in self.events],
            decisions=linked, decision_offsets=list(range(len(linked))),
        )

    def check(self) -> InvariantReport:
        return check_records(pool_records(self.pool_log()))


def _violation(log: Log, kind: str) -> str:
    report = log.check()
    assert report.violation is not None, f"no violation found, expected {kind}"
    assert report.violation.kind == kind, report.violation.describe()
    return report.violation.describe()


def _ok(log: Log) -> InvariantReport:
    report = log.check()
    assert report.ok, report.violation.describe() if report.violation else ""
    return report


def test_log_order_puts_each_decision_after_its_input_event() -> None:
    log = Log().node("n1").pod("a").bind("a", "n1").pod("b").pending("b").pod("c")
    order = [(p.topic, p.offset) for p, _ in pool_records(log.pool_log())]
    assert order == [(EVENTS_TOPIC, 0), (EVENTS_TOPIC, 1), (DECISIONS_TOPIC, 0), (EVENTS_TOPIC, 2),
                     (DECISIONS_TOPIC, 1), (EVENTS_TOPIC, 3)]


def _two_on(device_b: int) -> Log:
    return (Log().node("n1").pod("a").pod("b").bind("a", "n1", (0,)).bind("b", "n1", (device_b,))
            .bound("a", "n1", (0,)).bound("b", "n1", (device_b,))
            .pod("a", node_name="n1", gpu_indices=(0,), phase="Running")
            .pod("b", node_name="n1", gpu_indices=(device_b,), phase="Running"))


def test_whole_gpus_per_device() -> None:
    report = _ok(_two_on(1))
    assert report.pods["bound"] == 2
    message = _violation(_two_on(0), "over capacity (decided)")
    assert "node n1 gpu[0]: 2 GPU on a capacity of 1" in message and "ns/a, ns/b" in message
    assert "decisions offset 1" in message


def test_the_observed_view_alone_catches_a_bind_no_decision_made() -> None:
    log = Log().node("n1").pod("a").bind("a", "n1", (0,)).pod("a", node_name="n1", gpu_indices=(0,))
    _ok(log)
    log.pod("intruder", node_name="n1", gpu_indices=(0,), managed=False)
    message = _violation(log, "over capacity (observed)")
    assert "cluster-events offset 3" in message and "ns/intruder" in message


def test_a_device_index_the_node_does_not_have() -> None:
    log = Log().node("n1", gpus=2).pod("a").bind("a", "n1", (2,))
    assert "device index 2 does not exist" in _violation(log, "over capacity (decided)")


def test_fractions_share_a_device_up_to_one_gpu() -> None:
    def shared(second: int) -> Log:
        log = Log().node("n1", gpus=1)
        log.pod("a", requests=Resources(gpu_milli=500), gpu_fraction_milli=500)
        log.pod("b", requests=Resources(gpu_milli=second), gpu_fraction_milli=second)
        return log.bind("a", "n1", (0,)).bind("b", "n1", (0,))

    _ok(shared(500))
    assert "gpu[0]: 1.1 GPU on a capacity of 1" in _violation(shared(600), "over capacity (decided)")


def test_a_shared_device_is_a_whole_gpu_for_the_node() -> None:
    log = Log().node("n1", gpus=2)
    log.pod("f", requests=Resources(gpu_milli=300), gpu_fraction_milli=300)
    _ok(log.bind("f", "n1", (0,)))
    log.pod("w", requests=Resources(gpu_milli=2000)).bind("w", "n1", ())
    assert "node n1 gpu: 3 GPU on a capacity of 2" in _violation(log, "over capacity (decided)")


@pytest.mark.parametrize(("resource", "requests"), [
    ("cpu", Resources(cpu_milli=5000)),
    ("memory", Resources(memory=40 * GiB)),
])
def test_cpu_and_memory(resource: str, requests: Resources) -> None:
    log = Log().node("n1").pod("a", requests=requests).bind("a", "n1", ())
    _ok(log)
    log.pod("b", requests=requests).bind("b", "n1", ())
    message = _violation(log, "over capacity (decided)")
    assert f"node n1 {resource}: " in message


def _reclaim(pipelined_first: bool) -> Log:
    """Victim v runs on n1 (2 GPUs, both used); reclaimer r needs 1 GPU: v is evicted and terminates for a while."""
    log = (Log().node("n1").pod("v", requests=Resources(gpu_milli=2000)).bind("v", "n1", (0, 1))
           .pod("v", node_name="n1", gpu_indices=(0, 1), phase="Running").pod("r"))
    log.evict("v")
    if pipelined_first:
        log.pipeline("r", "n1", (0,))
    else:
        log.bind("r", "n1", (0,))
    log.evicted("v").pod("v", terminating=True)
    if pipelined_first:
        log.removed("v").bind("r", "n1", (0,)).bound("r", "n1", (0,))
    else:
        log.removed("v")
    return log


def test_terminating_pods_hold_their_gpus_until_removed() -> None:
    report = _ok(_reclaim(pipelined_first=True))
    assert report.pods == {"bound": 1, "evicted": 1}
    message = _violation(_reclaim(pipelined_first=False), "over capacity (decided)")
    assert "node n1 gpu[0]: 2 GPU" in message and "held by ns/r, ns/v" in message


def test_pipelined_reservations_may_not_overlap() -> None:
    log = _reclaim(pipelined_first=True)
    log.events, log.decisions = log.events[:6], log.decisions[:3]
    log.pod("r2").pipeline("r2", "n1", (1,))
    _ok(log)
    log.pod("r3").pipeline("r3", "n1", (1,))
    assert "gpu[1]" in _violation(log, "over capacity (reserved)")


def test_no_pod_bound_twice() -> None:
    log = Log().node("n1").pod("a").bind("a", "n1", (0,)).bound("a", "n1", (0,)).bound("a", "n1", (0,), already=True)
    _ok(log)
    twice = Log().node("n1").pod("a").bind("a", "n1", (0,)).bound("a", "n1", (0,)).bound("a", "n1", (0,))
    assert "second successful binding" in _violation(twice, "bound twice")
    again = Log().node("n1").node("n2").pod("a").bind("a", "n1", (0,)).pod("x").bind("a", "n2", (0,))
    assert "already promised node n1" in _violation(again, "bound twice")


def test_a_gang_is_never_left_partly_bound_after_its_cycle() -> None:
    def gang(bound: int) -> Log:
        log = Log().node("n1", gpus=4).group("g", 3)
        for i in range(3):
            log.pod(f"g{i}", pod_group="g")
        for i in range(bound):
            log.bind(f"g{i}", "n1", (i,), job="g")
        for i in range(bound, 3):
            log.pending(f"g{i}", job="g", code="GangIncomplete")
        return log.pod("later")

    _ok(gang(3))
    _ok(gang(0))
    message = _violation(gang(2), "partial gang")
    assert "job ns/g has 2 members" in message and "minMember 3" in message


def test_evicting_part_of_a_gang_below_min_member_is_caught() -> None:
    log = Log().node("n1", gpus=4).group("g", 2)
    for i in range(2):
        log.pod(f"g{i}", pod_group="g", node_name="n1", gpu_indices=(i,), phase="Running")
    log.pod("p")
    log.evict("g0", job="g")
    assert "job ns/g has 1 members" in _violation(log, "partial gang")


def test_every_created_pod_is_accounted_for() -> None:
    base = Log().node("n1", gpus=1).pod("a").pod("b").bind("a", "n1", (0,))
    message = _violation(base, "unaccounted pod")
    assert "pod ns/b" in message and "cluster-events offset 2" in message
    report = _ok(Log().node("n1", gpus=1).pod("a").pod("b").bind("a", "n1", (0,)).pending("b"))
    assert report.pods == {"bind decided": 1, "pending": 1}
    late = _ok(Log().node("n1", gpus=1).pod("a").bind("a", "n1", (0,)).pod("b"))
    assert late.pods["undecided"] == 1
    deleted = _ok(Log().node("n1", gpus=1).pod("a").pod("b").bind("a", "n1", (0,)).removed("b"))
    assert deleted.pods["deleted"] == 1


def test_an_eviction_needs_a_recorded_decision() -> None:
    log = Log().node("n1").pod("a", node_name="n1", gpu_indices=(0,), phase="Running").pod("b").pending("b")
    log.evicted("a")
    assert "no EvictionRequested decision" in _violation(log, "unrecorded eviction")


def test_the_chain_is_verified_first() -> None:
    log = Log().node("n1").pod("a").pod("b").bind("a", "n1", (0,)).bind("b", "n1", (1,))
    pool = log.pool_log()
    assert check_history(History(pools={"default": pool}, source="test")).ok
    pool.decisions[0] = pool.decisions[0].model_copy(update={"node": "n2"})
    report = check_history(History(pools={"default": pool}, source="test"))
    assert report.violation is not None and report.violation.kind == "broken chain"
    assert report.violation.position == Position("default", DECISIONS_TOPIC, 1, pool.decisions[1].ts)


def test_a_fraction_without_device_indices_counts_by_its_share() -> None:
    """A fractional pod placed before the scheduler (no gpu-indices annotation) may share a device: only its share
    counts against the node, so a moved half next to it fits, and a third half does not."""
    log = Log().node("n1", gpus=1)
    log.pod("old", requests=Resources(gpu_milli=500), gpu_fraction_milli=500, node_name="n1", phase="Running")
    log.pod("moved", requests=Resources(gpu_milli=500), gpu_fraction_milli=500).bind("moved", "n1", (0,))
    _ok(log)
    log.pod("third", requests=Resources(gpu_milli=500), gpu_fraction_milli=500).bind("third", "n1", (0,))
    assert "node n1 gpu: 1.5 GPU on a capacity of 1" in _violation(log, "over capacity (decided)")


def test_a_pod_observed_unbound_again_has_left_its_node() -> None:
    """The trace simulator re-queues an evicted pod under its uid: once observed pending it holds nothing, and
    binding it again is not a second bind."""
    log = _reclaim(pipelined_first=True)
    log.events, log.decisions = log.events[:6], log.decisions[:3]
    log.evicted("v").pod("v", node_name=None, gpu_indices=None, phase="Pending")
    log.bind("r", "n1", (0,)).bound("r", "n1", (0,)).pending("v")
    _ok(log)
    log.bind("v", "n1", (1,)).bound("v", "n1", (1,))
    assert _ok(log).pods == {"bound": 2}
    log.pod("w").bind("w", "n1", (1,))
    assert "gpu[1]" in _violation(log, "over capacity (decided)")


def test_a_cycle_is_judged_once_complete() -> None:
    """Inside one cycle a bind may take a device whose reservation a later decision of the same cycle moves (or
    drops); a reservation still overlapping when the cycle ends is caught, at that cycle's decision."""
    def cycle(then: str) -> Log:
        log = Log().node("n1", gpus=1).node("n2", gpus=1).pod("a").pipeline("a", "n1", (0,)).pod("b")
        log.bind("b", "n1", (0,))
        if then == "move":
            log.pipeline("a", "n2", (0,))
        elif then == "drop":
            log.pending("a")
        return log.pod("c")

    _ok(cycle("move"))
    _ok(cycle("drop"))
    message = _violation(cycle("keep"), "over capacity (reserved)")
    assert "decisions offset 1" in message and "held by ns/a, ns/b" in message


def test_the_command_exits_1_naming_the_violation_and_0_with_a_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from kai_stream.cli import _register, app

    _register()
    import kai_stream.cli.audit as command

    def serve(log: Log) -> None:
        history = History(pools={"default": log.pool_log()}, source="hand-made")
        monkeypatch.setattr(command, "open_history", lambda *_, **__: history)

    serve(_two_on(1))
    result = CliRunner().invoke(app, ["audit", "invariants", "somewhere"])
    assert result.exit_code == 0, result.output
    assert "all invariants hold" in result.output and "bound 2" in result.output
    serve(_two_on(0))
    result = CliRunner().invoke(app, ["audit", "invariants", "somewhere"])
    assert result.exit_code == 1
    assert "over capacity (decided)" in result.output and "node n1 gpu[0]" in result.output
    result = CliRunner().invoke(app, ["audit", "invariants", "somewhere", "--json"])
    assert result.exit_code == 1
    violation = orjson.loads(result.output)["violation"]
    numbers = (violation["node"], violation["resource"], violation["used"], violation["capacity"])
    assert numbers == ("n1", "gpu[0]", 2000, 1000)


def test_stale_and_duplicate_observations_are_judged_as_the_fold_takes_them() -> None:
    """A replayed record (same event id) and a stale copy (a resource version not above the one held) of a pod's
    Pending observation, arriving after it was bound: the fold ignores both, so the pod is still bound, not back to
    pending and owed a decision (the chaos benchmark's hostile replays were reported as unaccounted pods)."""
    log = Log().node("n1", gpus=1)
    pending = PodObserved(event_id="seen", ts=0.5, resource_version=1, pod=log.pods.setdefault("a", PodSpec(
        namespace="ns", name="a", uid="uid-a", queue="q", requests=Resources(gpu_milli=1000, cpu_milli=1000,
                                                                            memory=GiB))))
    log.events.append((len(log.events), pending))
    log.bind("a", "n1", (0,)).bound("a", "n1", (0,))
    running = pending.pod.model_copy(update={"node_name": "n1", "gpu_indices": (0,), "phase": "Running"})
    log.events.append((len(log.events), PodObserved(event_id="later", ts=3.0, resource_version=3, pod=running)))
    log.events.append((len(log.events), pending))  # the same record again
    log.events.append((len(log.events), pending.model_copy(update={"event_id": "renamed"})))  # stale, new id
    log.pod("b").bind("b", "n1", (0,))
    assert "gpu[0]" in _violation(log, "over capacity (decided)")  # a still holds its GPU
    log.decisions.pop()
    log.events.pop()
    assert _ok(log).pods == {"bound": 1}
    log.events.append((len(log.events), PodObserved(event_id="newer", ts=5.0, resource_version=4, pod=pending.pod)))
    log.pod("c").pending("c")
    assert "back to pending" in _violation(log, "unaccounted pod")  # a newer Pending observation is taken
