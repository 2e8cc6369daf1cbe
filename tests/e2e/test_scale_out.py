"""Two processors in one consumer group share the pools' partitions; when one is SIGKILLed its pools move to
the other, which rebuilds them from the log: every pod of both pools is bound once, decisions stay unique
and each pool's hash chain stays intact. Real broker over TCP (Tansu and Apache Kafka, where each partition's
transactional producer moves with it), simulated cluster over HTTP."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from kai_stream.connectors.simcluster.client import api_client
from kai_stream.core.events import BindRequested
from kai_stream.history.reader import read_broker
from kai_stream.kafka import partition_for
from kai_stream.pipeline import Pipeline, PipelineOptions
from tests.cluster_objects import create_pod, until
from tests.engines import EngineUnderTest
from tests.log_checks import assert_chained, assert_sound

POOLS = ("blue", "green")
POOL_LABEL = "kai.scheduler/node-pool"


def _node(name: str, pool: str) -> str:
    return f"""apiVersion: v1
kind: Node
metadata: {{name: {name}, labels: {{kai.scheduler/node-pool: {pool}}}}}
status: {{allocatable: {{nvidia.com/gpu: "4", cpu: "32", memory: 256Gi}}}}
"""


CLUSTER = "---\n".join(
    [_node(f"{pool}-{i}", pool) for pool in POOLS for i in range(2)]
    + [
        """apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: q}
spec: {resources: {gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}}
"""
    ]
)


def _pod(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "so", "labels": {"kai.scheduler/queue": "q", POOL_LABEL: pool}},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


@pytest.mark.kafka
async def test_two_processors_share_pools_and_survive_one_dying(
    engine: EngineUnderTest, topic_prefix: str, tmp_path: Path
) -> None:
    assert partition_for(POOLS[0], 8) != partition_for(POOLS[1], 8)
    scenario = tmp_path / "pools.yaml"
    scenario.write_text(CLUSTER)
    options = PipelineOptions(
        scenario=scenario,
        bootstrap_servers=engine.settings.bootstrap_servers,
        engine=engine.name,
        topic_prefix=topic_prefix,
        tick_interval_s=0.5,
    )
    async with Pipeline(options) as pipeline, api_client(pipeline.cluster.url or "") as api:
        core = client.CoreV1Api(api)
        second = pipeline.add_processor()
        names: list[str] = []
        for wave in range(2):
            for pool in POOLS:
                for i in range(3):
                    name = f"{pool}-w{wave}-{i}"
                    names.append(name)
                    await create_pod(core, "so", _pod(name, pool))
            bound = lambda e=set(names): {b.name for b in pipeline.cluster.bindings} >= e  # noqa: E731
            await until(bound, f"wave {wave}", pipeline, 60.0)
            if wave == 0:
                second.kill()
                second.wait(10)

        posts = Counter(b.name for b in pipeline.cluster.bindings)
        assert set(posts) == set(names) and set(posts.values()) == {1}
        nodes = {b.name: b.node for b in pipeline.cluster.bindings}
        assert all(nodes[n].startswith(n.split("-")[0]) for n in names)  # each pod on a node of its pool
        tail = pipeline.tail
        assert tail is not None
        seen = lambda: {d.name for d in tail.all_decisions() if isinstance(d, BindRequested)} >= set(names)  # noqa: E731
        await until(seen, "the log tail (it may be a fetch behind the binder) to read every bind", pipeline, 60.0)
        decisions = tail.all_decisions()
        assert Counter(d.name for d in decisions if isinstance(d, BindRequested)) == Counter(names)
        assert_chained(decisions)

        # ---- the recorded log (both processors, one SIGKILLed) replays identically
        assert pipeline.kafka is not None
        history = await read_broker(pipeline.kafka, pipeline.names)
        report = assert_sound(history)
        assert report.identical == history.decisions == len(decisions)
