"""End to end over the real broker (TCP; Tansu and Apache Kafka) and the simulated cluster (HTTP via
kubernetes-asyncio).

Pods are created through the API; the connector publishes them, the faust processor decides, the binder
(a `kai-stream binder` process) binds them. Each wave of pods is created while the processor is down, so
it is decided in one cycle and must match what in-process `simulate` decides for the same objects.
Processor and binder are SIGKILLed and restarted mid-run: nothing is lost, nothing is decided twice,
no pod is bound twice, and each pool's hash chain stays intact.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client

from kai_stream.connectors.simcluster.client import api_client
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import BindRequested
from kai_stream.core.manifests import load_scenario
from kai_stream.history.reader import read_broker
from kai_stream.pipeline import Pipeline, PipelineOptions
from kai_stream.simulate import simulate
from tests.cluster_objects import create_pod, gpu_pod, unlimited_queue, until
from tests.engines import EngineUnderTest
from tests.log_checks import assert_chained, assert_sound

CLUSTER = """
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {nvidia.com/gpu.memory: "81920"}}
status: {allocatable: {nvidia.com/gpu: "4", cpu: "32", memory: 256Gi}}
---
apiVersion: v1
kind: Node
metadata: {name: node-b, labels: {nvidia.com/gpu.memory: "81920"}}
status: {allocatable: {nvidia.com/gpu: "4", cpu: "32", memory: 256Gi}}
---
""" + unlimited_queue()


def _expected(pipeline: Pipeline, names: list[str]) -> dict[str, tuple[str | None, list[int] | None]]:
    """What in-process simulate decides for the cluster's current objects (pods as the API holds them)."""
    docs = [d for d in yaml.safe_load_all(CLUSTER)]
    docs += [pod for pod in pipeline.cluster.objects("Pod")]
    result = simulate(load_scenario(yaml.safe_dump_all(docs)), SchedulerConfig()).to_json()
    return {n: (result["pods"][f"e2e/{n}"]["node"], result["pods"][f"e2e/{n}"]["gpu_indices"]) for n in names}


def _binds(pipeline: Pipeline) -> dict[str, BindRequested]:
    assert pipeline.tail is not None
    return {d.name: d for d in pipeline.tail.all_decisions() if isinstance(d, BindRequested)}


@pytest.mark.kafka
async def test_pods_bound_as_simulate_decides_across_processor_and_binder_kills(
    engine: EngineUnderTest, topic_prefix: str, tmp_path: Path
) -> None:
    scenario = tmp_path / "cluster.yaml"
    scenario.write_text(CLUSTER)
    options = PipelineOptions(
        scenario=scenario,
        bootstrap_servers=engine.settings.bootstrap_servers,
        topic_prefix=topic_prefix,
        tick_interval_s=0.5,
        binder_subprocess=True,
    )
    wave1 = [f"w1-{i}" for i in range(4)]
    wave2 = [f"w2-{i}" for i in range(5)]
    async with Pipeline(options) as pipeline, api_client(pipeline.cluster.url or "") as api:
        core = client.CoreV1Api(api)
        # ---- wave 1, created while the processor is down: decided in one cycle, bound by the binder
        pipeline.stop_processor(kill=True)
        for i, name in enumerate(wave1):
            await create_pod(core, "e2e", gpu_pod(name, "e2e", 1 + i % 2, cpu="1"))
        expected1 = _expected(pipeline, wave1)
        pipeline.start_processor()
        await until(lambda: {b.name for b in pipeline.cluster.bindings} >= set(wave1), "wave 1 bound", pipeline, 60.0)
        live1 = {n: (d.node, list(d.gpu_indices) or None) for n, d in _binds(pipeline).items()}
        assert live1 == expected1

        def running(names: list[str]) -> bool:
            pods = {p["metadata"]["name"]: p for p in pipeline.cluster.objects("Pod")}
            return all(pods[n].get("status", {}).get("phase") == "Running" for n in names)

        await until(lambda: running(wave1), "wave 1 running", pipeline, 60.0)

        # ---- kill both; wave 2 arrives while they are down
        pipeline.stop_processor(kill=True)
        await pipeline.stop_binder(kill=True)
        for name in wave2:
            await create_pod(core, "e2e", gpu_pod(name, "e2e", 1, cpu="1"))
        expected2 = _expected(pipeline, wave2)
        fitting = {n for n, (node, _) in expected2.items() if node is not None}
        assert 0 < len(fitting) < len(wave2)  # some fit, some stay pending

        # processor decides wave 2, is killed right after publishing (before its commit), restarts
        pipeline.start_processor()
        await until(lambda: set(_binds(pipeline)) >= fitting, "wave 2 decided", pipeline, 60.0)
        pipeline.stop_processor(kill=True)
        pipeline.start_processor()

        # binder restarts, is killed after its first wave-2 binding, restarts again
        pipeline.start_binder()
        await until(lambda: any(b.name in fitting for b in pipeline.cluster.bindings), "a wave 2 bind", pipeline, 60.0)
        await pipeline.stop_binder(kill=True)
        pipeline.start_binder()
        await until(lambda: {b.name for b in pipeline.cluster.bindings} >= fitting, "wave 2 bound", pipeline, 60.0)
        await pipeline.wait_caught_up(timeout_s=60)

        # ---- nothing lost, nothing twice, exactly as simulate decided
        posts = Counter(b.name for b in pipeline.cluster.bindings)
        assert set(posts) == set(wave1) | fitting
        assert all(count == 1 for count in posts.values()), posts
        assert all(b.code == 201 for b in pipeline.cluster.bindings)
        assert pipeline.tail is not None
        decisions = pipeline.tail.all_decisions()
        bind_counts = Counter(d.name for d in decisions if isinstance(d, BindRequested))
        assert all(count == 1 for count in bind_counts.values()), bind_counts
        assert len({d.decision_id for d in decisions}) == len(decisions)
        live2 = {n: (d.node, list(d.gpu_indices) or None) for n, d in _binds(pipeline).items() if n in wave2}
        assert live2 == {n: v for n, v in expected2.items() if n in fitting}
        assert_chained(decisions)
        nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pipeline.cluster.objects("Pod")}
        assert {n: nodes[n] for n in fitting} == {n: expected2[n][0] for n in fitting}

        # ---- the recorded log (processor and binder restarts included) replays identically
        assert pipeline.kafka is not None
        history = await read_broker(pipeline.kafka, pipeline.names)
        report = assert_sound(history)
        assert report.identical == history.decisions == len(decisions)
