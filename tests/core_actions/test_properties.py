"""Property tests: the core invariants hold after every action of every cycle, and nothing oscillates.

Random small clusters: 1-3 nodes of 1-4 GPUs, 2-3 queues with random deserved GPU, running train pods (some
fractional, some in gangs) and pending pods of every priority class. Checked inside each cycle, after each of
the five actions, on the session's state (``_checked_actions``): no GPU device over-committed now or once the
releasing pods are gone, no node's CPU or memory over-committed, no gang left with placements below its
minMember, non-preemptible pods of a queue growing only within its deserved GPU; as each cycle closes, every
pending pod has a reason. Checked on the final state: the same, from the simulation's result; and 10 extra
cycles decide nothing (``assert_stable``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.manifests import load_scenario
from kai_stream.core.scheduler import actions
from kai_stream.core.scheduler.framework.info import ALLOCATED, GPU, PENDING, PIPELINED, RUNNING, UNIT
from kai_stream.core.scheduler.framework.session import Session
from kai_stream.simulate import simulate

from .harness import MAX_CYCLES, assert_stable, settle_with_restarts

CLASSES = ("train", "build-preemptible", "build", "inference")
NON_PREEMPTIBLE = ("build", "inference")


def _pod(name: str, queue: str, gpu: float, pclass: str, sec: int, node: str | None, group: str | None) -> Any:
    limits: dict[str, Any] = {"cpu": "1"}
    annotations: dict[str, str] = {}
    if gpu >= 1:
        limits["nvidia.com/gpu"] = str(int(gpu))
    elif gpu > 0:
        annotations["gpu-fraction"] = str(gpu)
    if group:
        annotations["pod-group-name"] = group
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler",
        "priorityClassName": pclass,
        "containers": [{"name": "c", "resources": {"limits": limits}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "t",
            "creationTimestamp": f"2026-01-01T00:{sec // 60:02d}:{sec % 60:02d}Z",
            "labels": {"kai.scheduler/queue": queue},
            "annotations": annotations,
        },
        "spec": spec,
    }


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Any], dict[str, Any]]:
    docs: list[Any] = []
    nodes = {f"n{i}": draw(st.integers(1, 4)) for i in range(draw(st.integers(1, 3)))}
    for name, gpus in nodes.items():
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name},
                "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "64Gi"}},
            }
        )
    quotas = {f"q{i}": draw(st.integers(0, 3)) for i in range(draw(st.integers(2, 3)))}
    for name, quota in quotas.items():
        docs.append(
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": {"resources": {"gpu": {"quota": quota, "overQuotaWeight": 1, "limit": -1}}},
            }
        )
    facts: dict[str, Any] = {"nodes": nodes, "quotas": quotas, "pods": {}, "gangs": {}}
    free = {n: [1.0] * g for n, g in nodes.items()}
    sec = 0
    for i in range(draw(st.integers(0, 5))):
        node = draw(st.sampled_from(sorted(nodes)))
        gpu = draw(st.sampled_from([0.5, 1.0]))
        slot = next((g for g, f in enumerate(free[node]) if f >= gpu), None)
        if slot is None:
            continue
        free[node][slot] -= gpu
        queue = draw(st.sampled_from(sorted(quotas)))
        sec += 1
        pod = _pod(f"r{i}", queue, gpu, "train", sec, node, None)
        pod["metadata"]["annotations"]["kai.scheduler/gpu-indices"] = str(slot)
        docs.append(pod)
        facts["pods"][f"t/r{i}"] = (gpu, "train", queue)
    for i in range(draw(st.integers(1, 5))):
        queue = draw(st.sampled_from(sorted(quotas)))
        pclass = draw(st.sampled_from(CLASSES))
        gpu = draw(st.sampled_from([0.5, 1.0, 2.0]))
        size = draw(st.integers(1, 2))
        group = f"g{i}" if size > 1 else None
        if group:
            docs.append(
                {
                    "apiVersion": "scheduling.run.ai/v2alpha2",
                    "kind": "PodGroup",
                    "metadata": {"name": group, "namespace": "t"},
                    "spec": {"minMember": size, "queue": queue, "priorityClassName": pclass},
                }
            )
            facts["gangs"][group] = (size, [f"t/p{i}-{k}" for k in range(size)])
        for k in range(size):
            sec += 1
            docs.append(_pod(f"p{i}-{k}", queue, gpu, pclass, sec, None, group))
            facts["pods"][f"t/p{i}-{k}"] = (gpu, pclass, queue)
    return docs, facts


def _check_session(ssn: Session, action: str, np_at_open: dict[str, int]) -> None:
    for node in ssn.nodes:
        for g in range(node.gpu_count):
            assert node.gpu_used[g] <= UNIT, (action, node.name, g, "GPU over-committed now")
            assert node.gpu_free_future(g) >= 0, (action, node.name, g, "GPU over-committed once released")
        assert node.cpu_free_now() >= 0 and node.cpu_free_future() >= 0, (action, node.name, "CPU")
        assert node.mem_free_now() >= 0 and node.mem_free_future() >= 0, (action, node.name, "memory")
    for job in ssn.jobs:
        placed = sum(1 for t in job.tasks if t.status in (ALLOCATED, PIPELINED))
        active = sum(1 for t in job.tasks if t.status in (ALLOCATED, PIPELINED, RUNNING))
        assert placed == 0 or active >= job.min_member, (action, job.key, active, job.min_member)
    for q in ssn.queues.values():
        quota = q.quota[GPU]
        if quota >= 0:
            assert q.allocated_np[GPU] <= max(quota, np_at_open[q.name]), (action, q.name, q.allocated_np, quota)


@contextmanager
def _checked_actions() -> Iterator[list[str]]:
    """Every action of every cycle followed by ``_check_session``, and every cycle's close by a check that each
    pending pod has a reason; yields the names of the actions checked."""
    ran: list[str] = []
    opened: dict[int, dict[str, int]] = {}

    def checked(name: str, action: Callable[[Session], None]) -> Callable[[Session], None]:
        def run(ssn: Session) -> None:
            at_open = opened.setdefault(id(ssn), {q.name: q.allocated_np[GPU] for q in ssn.queues.values()})
            action(ssn)
            _check_session(ssn, name, at_open)
            ran.append(name)

        return run

    real_close = Session.close

    def close(ssn: Session) -> Any:
        opened.pop(id(ssn), None)
        unexplained = [t.uid for t in ssn.tasks.values() if t.status == PENDING and t.uid not in ssn.pending]
        assert not unexplained, ("pending pods without a reason", unexplained)
        return real_close(ssn)

    with pytest.MonkeyPatch.context() as patch:
        for name, action in list(actions.ACTIONS.items()):
            patch.setitem(actions.ACTIONS, name, checked(name, action))
        patch.setattr(Session, "close", close)
        yield ran


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_invariants_after_every_action_and_no_oscillation(case: tuple[list[Any], dict[str, Any]]) -> None:
    docs, facts = case
    config = SchedulerConfig()
    with _checked_actions() as ran:
        result = simulate(load_scenario(yaml.safe_dump_all(docs)), config, cycles=MAX_CYCLES)
    assert set(ran) == set(config.actions)
    assert_stable(result)
    pods = result.to_json()["pods"]
    used: dict[tuple[str, int], float] = {}
    for key, pod in pods.items():
        if pod["status"] != "Running":
            continue
        gpu = facts["pods"][key][0]
        for g in pod["gpu_indices"] or []:
            used[(pod["node"], g)] = used.get((pod["node"], g), 0.0) + min(gpu, 1.0)
    assert all(v <= 1.0 + 1e-9 for v in used.values()), used
    for size, members in facts["gangs"].values():
        running = sum(1 for m in members if pods[m]["status"] in ("Running", "Pipelined"))
        assert running in (0, size) or running >= size, (members, running)
    for queue, quota in facts["quotas"].items():
        held = sum(
            gpu
            for key, (gpu, pclass, q) in facts["pods"].items()
            if q == queue and pclass in NON_PREEMPTIBLE and pods[key]["status"] == "Running"
        )
        assert held <= quota + 1e-9, (queue, held, quota)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_no_oscillation_when_evicted_pods_come_back(case: tuple[list[Any], dict[str, Any]]) -> None:
    docs, _ = case
    cycles = settle_with_restarts(load_scenario(yaml.safe_dump_all(docs)), SchedulerConfig(), cycles=30)
    assert cycles <= 30, "still deciding after 30 cycles with restarted victims"
