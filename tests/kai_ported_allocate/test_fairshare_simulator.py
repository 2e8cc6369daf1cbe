"""KAI's fair-share simulator (``cmd/fairshare-simulator``): its example request (``example.http``, repeated in the
README) and the response the README gives for it, as fair shares of ours.

The simulator builds its queues with KAI's overrides defaults (``resource_share_defaults.go``): a resource the
request leaves out is deserved 0 for GPU, unlimited for CPU and memory, weight 1, request 100000, no limit. So
the example asks 100 GPUs (10 deserved each, 80 over quota split 3:1), and each queue's unlimited CPU and memory
deserve what it requests, at most the total: 16000 CPU, 100000 memory (of 32000000). Units are the simulator's
(GPU devices, CPU millicores, memory as given); ours are milli-devices, millicores and bytes.

The same queues as objects of a cluster (a ``Queue`` each, pending pods that ask 100 GPU) get the same GPU
shares from a scheduling cycle.
"""

from __future__ import annotations

from typing import Any

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    AnyEvent,
    PodGroupObserved,
    PodGroupSpec,
    PodObserved,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
)
from kai_stream.core.scheduler.cycle import run_cycle
from kai_stream.core.scheduler.fairshare import set_fair_shares
from kai_stream.core.scheduler.framework.info import CPU, GPU, MEM, QueueInfo
from kai_stream.core.scheduler.framework.session import Session
from tests.core_actions.builders import fold, node_events

UNL = -1
DEFAULT_REQUEST = 100000
"""KAI ``resource_share_defaults.go`` ``defaultRequest``."""

EXAMPLE: dict[str, Any] = {
    "totalResource": {"GPU": 100, "CPU": 16000, "Memory": 32000000},
    "queues": [
        {
            "uid": "queue1",
            "name": "test-queue",
            "priority": 0,
            "resourceShare": {"gpu": {"deserved": 10, "request": 100, "overQuotaWeight": 3}},
        },
        {
            "uid": "queue2",
            "name": "test-queue2",
            "priority": 0,
            "resourceShare": {"gpu": {"deserved": 10, "request": 100, "overQuotaWeight": 1}},
        },
    ],
}
RESPONSE = {
    "queue1": {"gpu": 70, "cpu": 16000, "memory": 100000},
    "queue2": {"gpu": 30, "cpu": 16000, "memory": 100000},
}
"""The README's response to the example."""

SCALE = {GPU: 1000, CPU: 1, MEM: 1}
NAMES = {GPU: "gpu", CPU: "cpu", MEM: "memory"}


def _overrides(share: dict[str, Any] | None, r: int) -> tuple[int, int, int, int]:
    """(deserved, limit, weight, request) of one resource, in our units, with the simulator's defaults."""
    default_deserved = 0 if r == GPU else UNL
    share = share or {"deserved": default_deserved}

    def scaled(key: str, default: float) -> int:
        value = share.get(key, default)
        return UNL if value == UNL else round(value * SCALE[r])

    return (
        scaled("deserved", 0),
        scaled("maxAllowed", UNL),
        int(share.get("overQuotaWeight", 1)),
        scaled("request", DEFAULT_REQUEST),
    )


def _queue(spec: dict[str, Any], order: int) -> QueueInfo:
    per = [_overrides(spec["resourceShare"].get(NAMES[r]), r) for r in (GPU, CPU, MEM)]
    q = QueueInfo(
        name=spec["uid"],
        uid=spec["uid"],
        parent_name=None,
        priority=spec.get("priority", 0),
        created=float(order),
        quota=[p[0] for p in per],
        limit=[p[1] for p in per],
        weight=[p[2] for p in per],
    )
    q.request = [p[3] for p in per]
    return q


def test_the_simulators_example_gets_the_readmes_response() -> None:
    queues = [_queue(spec, i) for i, spec in enumerate(EXAMPLE["queues"])]
    total = EXAMPLE["totalResource"]
    set_fair_shares(queues, [total["GPU"] * 1000, total["CPU"], total["Memory"]])
    got = {q.uid: {NAMES[r]: q.fair_share[r] / SCALE[r] for r in (GPU, CPU, MEM)} for q in queues}
    assert got == RESPONSE


def _cluster() -> list[AnyEvent]:
    """100 GPUs in 25 nodes; per queue of the example, a Queue and 100 pending one-GPU pods."""
    events: list[AnyEvent] = list(node_events(25, 4))
    for i, spec in enumerate(EXAMPLE["queues"]):
        gpu = spec["resourceShare"]["gpu"]
        resources = QueueResources(
            gpu=QueueResource(quota=gpu["deserved"] * 1000, over_quota_weight=gpu["overQuotaWeight"]),
            cpu=QueueResource(quota=UNL),
            memory=QueueResource(quota=UNL),
        )
        queue = QueueSpec(name=spec["uid"], priority=spec["priority"], resources=resources, created=float(i))
        events.append(QueueObserved(event_id=f"q{i}", ts=0.0, queue=queue))
        group = PodGroupSpec(namespace="t", name=f"job-{i}", queue=spec["uid"], min_member=1, created=10.0 + i)
        events.append(PodGroupObserved(event_id=f"g{i}", ts=0.0, pod_group=group))
        for k in range(gpu["request"]):
            pod = PodSpec(
                namespace="t",
                name=f"job-{i}-{k}",
                uid=f"u{i}-{k}",
                queue=spec["uid"],
                pod_group=f"job-{i}",
                requests=Resources(gpu_milli=1000, cpu_milli=100, memory=2**20),
                created=10.0 + i,
            )
            events.append(PodObserved(event_id=f"p{i}-{k}", ts=0.0, pod=pod))
    return events


def test_the_example_as_cluster_objects_gets_the_same_gpu_shares() -> None:
    state = fold(_cluster())
    shares: dict[str, float] = {}

    def inspect(session: Session) -> None:
        for q in session.queues.values():
            shares[q.name] = q.fair_share[GPU] / 1000

    run_cycle(state, SchedulerConfig(actions=("allocate",)), pool="default", input_offset=state.offset, inspect=inspect)
    assert shares == {uid: share["gpu"] for uid, share in RESPONSE.items()}
