"""End to end: a GPU the NVML agent reports with a fatal XID leaves the pool, and the pending reason says so.

Real at every joint: the agent (driven through a recorded NVML seam) publishes its reading to cluster-events on
the Tansu broker over TCP; the connector watches the simulated cluster over HTTP; the faust processor decides;
the binder marks the pending pod PodScheduled=False and binds the pod that fits on the healthy GPU. The pod is
read back over HTTP with kubernetes-asyncio.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from nvml.recorded import Gpu, RecordedNvml

from kai_stream.connectors.nvml import AgentConfig, GpuAgent, GpuReader, XidEvent, kafka_sink
from kai_stream.connectors.simcluster.client import api_client
from kai_stream.core.events import BindRequested, GpuHealthObserved, PodPending
from kai_stream.core.manifests import ANNOTATION_GPU_INDICES
from kai_stream.history.reader import read_broker
from kai_stream.kafka import make_producer
from kai_stream.pipeline import Pipeline, PipelineOptions
from kai_stream.replay.testing import assert_replays_identically
from tests.cluster_objects import create_pod, gpu_pod, unlimited_queue, until

NODE = "gpu-node-1"
CLUSTER = f"""
apiVersion: v1
kind: Node
metadata: {{name: {NODE}}}
status: {{allocatable: {{nvidia.com/gpu: "2", cpu: "16", memory: 64Gi}}}}
---
""" + unlimited_queue()


async def _publish_reading(pipeline: Pipeline) -> GpuHealthObserved:
    """The agent's own poll and Kafka sink; GPU 0 (GPU-0) has fallen off the bus (XID 79)."""
    assert pipeline.kafka is not None
    api = RecordedNvml([Gpu(uuid="GPU-0"), Gpu(uuid="GPU-1")])
    api.xids.append(XidEvent("GPU-0", 79))
    reader = GpuReader(api)
    reader.open()
    assert reader.wait_xids(0) == [XidEvent("GPU-0", 79)]
    producer = make_producer(pipeline.kafka)
    await producer.start()
    try:
        topic = pipeline.names.cluster_events
        agent = GpuAgent(reader, AgentConfig(node=NODE, topic=topic), kafka_sink(producer, topic))
        sent = await agent.poll_once()
    finally:
        await producer.stop()
        reader.close()
    assert sent is not None
    return sent


async def test_fatal_xid_gpu_leaves_the_pool_and_the_pending_reason_says_so(
    broker: str, topic_prefix: str, tmp_path: Path
) -> None:
    scenario = tmp_path / "cluster.yaml"
    scenario.write_text(CLUSTER)
    options = PipelineOptions(
        scenario=scenario, bootstrap_servers=broker, topic_prefix=topic_prefix, tick_interval_s=0.5
    )
    async with Pipeline(options) as pipeline, api_client(pipeline.cluster.url or "") as api:
        tail = pipeline.tail
        assert tail is not None
        core = client.CoreV1Api(api)

        sent = await _publish_reading(pipeline)
        assert [(g.index, g.healthy, g.reason) for g in sent.gpus] == [(0, False, "fatal XID 79"), (1, True, "")]
        await until(
            lambda: any(e == sent for events in tail.events.values() for _, e in events),
            "reading on the log",
            pipeline,
            30.0,
        )

        # ---- a pod that needs both GPUs stays pending, and says it is the unhealthy GPU's doing
        await create_pod(core, "gpu", gpu_pod("needs-two", "gpu", 2))

        def pending() -> list[PodPending]:
            return [d for d in tail.all_decisions() if isinstance(d, PodPending) and d.name == "needs-two"]

        await until(lambda: bool(pending()), "needs-two pending", pipeline, 30.0)
        decision = pending()[0]
        assert decision.code == "Unhealthy", decision
        assert decision.predicates == {"UnhealthyGPU": 1}
        assert decision.reason.endswith(f"unhealthy GPUs: {NODE} GPU 0 (GPU-0): fatal XID 79"), decision.reason

        async def condition() -> dict[str, Any] | None:
            pod = await core.read_namespaced_pod_status("needs-two", "gpu")
            found = [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]
            return (
                {"status": found[0].status, "reason": found[0].reason, "message": found[0].message} if found else None
            )

        deadline = time.monotonic() + 30
        while (marked := await condition()) is None:
            assert pipeline.failed() is None, pipeline.failed()
            assert time.monotonic() < deadline, "binder never set PodScheduled on needs-two"
            await asyncio.sleep(0.1)
        assert marked["status"] == "False" and marked["reason"] == "Unschedulable"
        assert marked["message"] == decision.reason

        # ---- a pod that needs only the healthy GPU count is bound, to the healthy GPU
        await create_pod(core, "gpu", gpu_pod("needs-one", "gpu", 1))
        bound_one = lambda: any(b.name == "needs-one" for b in pipeline.cluster.bindings)  # noqa: E731
        await until(bound_one, "needs-one bound", pipeline, 30.0)
        binds = [d for d in tail.all_decisions() if isinstance(d, BindRequested)]
        assert [(b.name, b.node, b.gpu_indices) for b in binds] == [("needs-one", NODE, (1,))]
        bound = await core.read_namespaced_pod("needs-one", "gpu")
        assert bound.spec.node_name == NODE
        assert bound.metadata.annotations[ANNOTATION_GPU_INDICES] == "1"

        # ---- nothing ever lands on GPU 0; needs-two is still unbound
        await pipeline.wait_caught_up(timeout_s=20)
        assert [b.name for b in pipeline.cluster.bindings] == ["needs-one"]
        assert all(0 not in d.gpu_indices for d in tail.all_decisions() if isinstance(d, BindRequested))
        assert (await core.read_namespaced_pod("needs-two", "gpu")).spec.node_name is None

        # ---- the recorded log (the GPU health reading included) replays identically
        assert pipeline.kafka is not None
        history = await read_broker(pipeline.kafka, pipeline.names)
        report = assert_replays_identically(history)
        assert report.identical == history.decisions
