"""Properties over random clusters (all default actions): no over-commit, gangs all-or-nothing, non-preemptible
within deserved, every pending pod has a pending reason, byte-identical reruns, manifest order never matters."""

from __future__ import annotations

import random
from typing import Any

import orjson
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.manifests import load_scenario
from kai_stream.simulate import simulate

PRIORITY = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Random manifests plus what the checks need (node sizes, pod requests, gangs, quotas)."""
    docs: list[dict[str, Any]] = []
    nodes = {}
    for i in range(draw(st.integers(1, 4))):
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        cpu = draw(st.sampled_from([4, 16, 64]))
        nodes[f"n{i}"] = (gpus, cpu * 1000)
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"n{i}"},
                "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": str(cpu), "memory": "64Gi"}},
            }
        )
    nested = draw(st.booleans())
    if nested:
        docs.append({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "root"}, "spec": {}})
    quotas = {}
    leaves = [f"q{i}" for i in range(draw(st.integers(1, 3)))]
    for i, name in enumerate(leaves):
        quota = draw(st.sampled_from([-1, 0, 1, 2, 4]))
        limit = draw(st.sampled_from([-1, -1, 2, 6]))
        quotas[name] = quota
        spec: dict[str, Any] = {
            "priority": draw(st.sampled_from([100, 100, 200])),
            "resources": {"gpu": {"quota": quota, "limit": limit, "overQuotaWeight": draw(st.integers(0, 3))}},
        }
        if nested:
            spec["parentQueue"] = "root"
        docs.append(
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": {"name": name, "creationTimestamp": f"2026-01-01T00:00:0{i}Z"},
                "spec": spec,
            }
        )
    pods: dict[str, tuple[int, int, str]] = {}
    gangs: dict[str, tuple[int, list[str]]] = {}
    for j in range(draw(st.integers(0, 8))):
        queue = draw(st.sampled_from(leaves))
        pclass = draw(st.sampled_from(["train", "build", "inference", "build-preemptible"]))
        size = draw(st.integers(1, 3))
        gang = size > 1
        fraction = None if gang else draw(st.sampled_from([None, None, "0.25", "0.5"]))
        gpus = 0 if fraction else draw(st.integers(0, 3))
        cpu = draw(st.sampled_from([1, 2, 8]))
        created = f"2026-01-01T00:01:{j:02d}Z"
        if gang:
            minimum = draw(st.integers(1, size))
            gangs[f"t/g{j}"] = (minimum, [])
            docs.append(
                {
                    "apiVersion": "scheduling.run.ai/v2alpha2",
                    "kind": "PodGroup",
                    "metadata": {"name": f"g{j}", "namespace": "t", "creationTimestamp": created},
                    "spec": {"minMember": minimum, "queue": queue, "priorityClassName": pclass},
                }
            )
        for k in range(size):
            name = f"p{j}-{k}"
            annotations: dict[str, str] = {}
            if fraction:
                annotations["gpu-fraction"] = fraction
            if gang:
                annotations["pod-group-name"] = f"g{j}"
                gangs[f"t/g{j}"][1].append(f"t/{name}")
            gpu_milli = int(float(fraction) * 1000) if fraction else gpus * 1000
            pods[f"t/{name}"] = (gpu_milli, cpu * 1000, pclass)
            limits: dict[str, Any] = {"cpu": str(cpu)}
            if gpus:
                limits["nvidia.com/gpu"] = gpus
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": "t",
                        "creationTimestamp": created,
                        "labels": {"kai.scheduler/queue": queue},
                        "annotations": annotations,
                    },
                    "spec": {
                        "schedulerName": "kai-scheduler",
                        "priorityClassName": pclass,
                        "containers": [{"name": "c", "resources": {"limits": limits}}],
                    },
                }
            )
    facts = {"nodes": nodes, "pods": pods, "gangs": gangs, "quotas": quotas}
    return docs, facts


def _run(docs: list[dict[str, Any]]) -> bytes:
    events = load_scenario(yaml.safe_dump_all(docs))
    result = simulate(events, SchedulerConfig(), cycles=10).to_json()
    return orjson.dumps(result, option=orjson.OPT_SORT_KEYS)


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(clusters())
def test_invariants(case: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    docs, facts = case
    result = orjson.loads(_run(docs))
    pods = result["pods"]
    used_gpu: dict[tuple[str, int], int] = {}
    whole: dict[tuple[str, int], int] = {}
    used_cpu: dict[str, int] = {}
    for key, pod in pods.items():
        if pod["status"] != "Running":
            continue
        gpu_milli, cpu, _ = facts["pods"][key]
        node = pod["node"]
        used_cpu[node] = used_cpu.get(node, 0) + cpu
        indices = pod["gpu_indices"] or []
        if gpu_milli:
            if gpu_milli % 1000 == 0:
                assert len(indices) == gpu_milli // 1000
            else:
                assert len(indices) == 1
            for g in indices:
                assert 0 <= g < facts["nodes"][node][0]
                portion = 1000 if gpu_milli >= 1000 else gpu_milli
                used_gpu[(node, g)] = used_gpu.get((node, g), 0) + portion
                if gpu_milli >= 1000:
                    whole[(node, g)] = whole.get((node, g), 0) + 1
    assert all(v <= 1000 for v in used_gpu.values()), used_gpu
    assert all(v <= 1 for v in whole.values()), whole
    for node, cpu in used_cpu.items():
        assert cpu <= facts["nodes"][node][1]
    explained = {f"{d['namespace']}/{d['name']}" for d in result["decisions"] if d["type"] == "PodPending"}
    assert {k for k, p in pods.items() if p["status"] == "Pending"} <= explained
    for minimum, members in facts["gangs"].values():
        running = sum(1 for m in members if pods[m]["status"] == "Running")
        assert running == 0 or running >= minimum
    for queue, quota in facts["quotas"].items():
        if quota < 0:
            continue
        non_preemptible = sum(
            facts["pods"][k][0]
            for k, p in pods.items()
            if p["status"] == "Running" and p["queue"] == queue and PRIORITY[facts["pods"][k][2]] >= 100
        )
        assert non_preemptible <= quota * 1000


@PROPERTY
@given(clusters(), st.integers(0, 2**32 - 1))
def test_deterministic_and_order_independent(case: tuple[list[dict[str, Any]], dict[str, Any]], seed: int) -> None:
    docs, _ = case
    first = _run(docs)
    assert _run(docs) == first
    shuffled = list(docs)
    random.Random(seed).shuffle(shuffled)
    assert _run(shuffled) == first
