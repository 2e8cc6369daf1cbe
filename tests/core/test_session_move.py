"""The session's one resource primitive and the reused snapshot's dirty set.

``Session.move`` is the only way a task's resources move on its node and its queues: placing, pipelining,
evicting and undoing each of them must leave the node's buckets and the queue tree exactly as the arithmetic of
what the task holds says, and undoing must restore every number. A parked snapshot keeps its own dirty set, fed by
the keys ``state.apply`` reports: a pod change names its job, a node change the node, a queue change everything.
"""

from __future__ import annotations

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    EvictionRequested,
    NodeObserved,
    NodeSpec,
    PodObserved,
    PodPipelined,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
)
from kai_stream.core.scheduler.cycle import plugins_of, run_cycle
from kai_stream.core.scheduler.framework.info import GPU, PIPELINED, RELEASING, UNIT, NodeInfo, QueueInfo
from kai_stream.core.scheduler.framework.nodeindex import Placement
from kai_stream.core.scheduler.framework.reuse import Snapshot, open_session
from kai_stream.core.scheduler.framework.session import Session
from kai_stream.core.state import NODE_MARK, ClusterState, apply, fold

GIB = 2**30


def _state() -> ClusterState:
    node = NodeSpec(name="n0", allocatable=Resources(gpu_milli=4000, cpu_milli=16_000, memory=64 * GIB))
    res = QueueResources(gpu=QueueResource(quota=2000))
    pods = [
        PodSpec(
            namespace="t",
            name=name,
            uid=name,
            queue="team",
            requests=Resources(gpu_milli=milli, cpu_milli=1000, memory=GIB),
            gpu_fraction_milli=milli if milli < UNIT else None,
            priority_class=pclass,
            node_name=node_name,
            gpu_indices=(0,) if node_name else None,
            phase="Running" if node_name else "Pending",
            created=float(i),
        )
        for i, (name, milli, pclass, node_name) in enumerate(
            [("run", 1000, "build", "n0"), ("half", 500, "train", None), ("whole", 2000, "train", None)]
        )
    ]
    return fold(
        [
            NodeObserved(event_id="n0", ts=0.0, node=node),
            QueueObserved(event_id="root", ts=0.0, queue=QueueSpec(name="root")),
            QueueObserved(event_id="team", ts=0.0, queue=QueueSpec(name="team", parent="root", resources=res)),
            *(PodObserved(event_id=p.uid, ts=0.0, pod=p) for p in pods),
        ]
    )


def _numbers(ssn: Session) -> tuple[object, ...]:
    node: NodeInfo = ssn.node_by_name["n0"]
    queues: list[QueueInfo] = [ssn.queues["team"], ssn.queues["root"]]
    return (
        node.gpu_used[:], node.gpu_rel[:], node.gpu_pipe[:],
        (node.cpu_used, node.cpu_rel, node.cpu_pipe, node.mem_used, node.mem_rel, node.mem_pipe),
        [(q.allocated[:], q.allocated_np[:]) for q in queues],
    )  # fmt: skip


def _session() -> Session:
    state = _state()
    config = SchedulerConfig()
    return open_session(state, config, plugins_of(config), pool="default", input_offset=state.offset, code_version="")


def test_place_and_unplace_move_the_node_bucket_and_the_queue_tree_and_undo_exactly() -> None:
    ssn = _session()
    node = ssn.node_by_name["n0"]
    team, root = ssn.queues["team"], ssn.queues["root"]
    assert node.gpu_used == [1000, 0, 0, 0] and team.allocated[GPU] == root.allocated[GPU] == 1000
    assert team.allocated_np[GPU] == 1000, "the running 'build' pod is not preemptible"
    opened = _numbers(ssn)
    half, whole = ssn.tasks["half"], ssn.tasks["whole"]
    ssn.place(half, node, (1,), 500, pipelined=False)
    ssn.place(whole, node, (2, 3), UNIT, pipelined=True)
    assert node.gpu_used == [1000, 500, 0, 0] and node.gpu_pipe == [0, 0, 1000, 1000]
    assert (node.cpu_used, node.cpu_pipe, node.mem_used, node.mem_pipe) == (2000, 1000, 2 * GIB, GIB)
    assert team.allocated == root.allocated == [3500, 3000, 3 * GIB]
    assert team.allocated_np == [1000, 1000, GIB], "train pods are preemptible: not in allocated_np"
    ssn.unplace(whole)
    ssn.unplace(half)
    assert _numbers(ssn) == opened


def test_release_and_unrelease_move_the_releasing_bucket_and_uncharge_the_queue() -> None:
    ssn = _session()
    node = ssn.node_by_name["n0"]
    team = ssn.queues["team"]
    opened = _numbers(ssn)
    running = ssn.tasks["run"]
    previous = ssn.release(running)
    assert running.status == RELEASING and ssn.releasing_tasks["n0"] == [running]
    assert node.gpu_used == [1000, 0, 0, 0] and node.gpu_rel == [1000, 0, 0, 0]
    assert (node.cpu_rel, node.mem_rel) == (1000, GIB)
    assert team.allocated == [0, 0, 0] and team.allocated_np == [0, 0, 0]
    ssn.unrelease(running, previous)
    assert running.status == previous and ssn.releasing_tasks["n0"] == []
    assert _numbers(ssn) == opened


def test_evicting_a_pod_pipelined_in_the_session_gives_up_its_nomination_and_undoes_exactly() -> None:
    ssn = _session()
    node = ssn.node_by_name["n0"]
    team = ssn.queues["team"]
    running, whole = ssn.tasks["run"], ssn.tasks["whole"]
    stmt = ssn.statement("consolidation")
    stmt.evict(running)
    stmt.pipeline(whole, Placement(node, (0, 1), UNIT, pipelined=True))
    pipelined = stmt.commit()
    assert [type(d) for d in pipelined] == [EvictionRequested, PodPipelined]
    before = _numbers(ssn)
    stmt = ssn.statement("reclaim")
    stmt.evict(whole)
    assert whole.status == RELEASING and ssn.releasing_tasks["n0"] == [running], "it releases nothing"
    assert node.gpu_pipe == [0, 0, 0, 0] and (node.cpu_pipe, node.mem_pipe) == (0, 0)
    assert team.allocated == [0, 0, 0]
    stmt.discard()
    assert whole.status == PIPELINED and _numbers(ssn) == before
    stmt.evict(whole)
    assert stmt.commit() == [], "no eviction of a pod that never ran"
    assert ssn.decisions == pipelined[:1], "its PodPipelined of this session is withdrawn"


def test_a_parked_snapshot_keeps_the_keys_the_fold_reports() -> None:
    state = _state()
    config = SchedulerConfig()
    run_cycle(state, config, pool="default", input_offset=state.offset)
    snapshot = state.derived.parked["default"]
    assert isinstance(snapshot, Snapshot) and snapshot.dirty == set()
    pod = state.pods["half"].model_copy(update={"labels": {"a": "b"}})
    apply(state, PodObserved(event_id="relabel", ts=1.0, pod=pod), state.offset + 1)
    node = state.nodes["n0"].model_copy(update={"labels": {"zone": "a"}})
    apply(state, NodeObserved(event_id="n0-zone", ts=1.0, node=node), state.offset + 1)
    apply(state, NodeObserved(event_id="n0-again", ts=1.0, node=node), state.offset + 1)
    assert snapshot.dirty == {"t/half", NODE_MARK + "n0"}
    queue = state.queues["team"].model_copy(update={"priority": 7})
    apply(state, QueueObserved(event_id="team-prio", ts=1.0, queue=queue), state.offset + 1)
    assert snapshot.dirty is None, "a queue change touches every job: only a full build will do"
    run_cycle(state, config, pool="default", input_offset=state.offset)
    rebuilt = state.derived.parked["default"]
    assert isinstance(rebuilt, Snapshot) and rebuilt is not snapshot and rebuilt.dirty == set()
