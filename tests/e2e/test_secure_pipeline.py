"""The pipeline over SASL_SSL: connector, processor (a subprocess), binder (a ``kai-stream binder`` subprocess) and the
log tail all reach the session's SASL_SSL Apache Kafka (``secure_kafka``) with the settings it handed out, and pods
created on the simulated cluster are bound; the log read back over SASL_SSL breaks no invariant and replays alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from kai_stream.connectors.simcluster.client import api_client
from kai_stream.history.reader import read_broker
from kai_stream.pipeline import Pipeline, PipelineOptions
from kai_stream.settings import KafkaSettings
from tests.cluster_objects import create_pod, gpu_nodes, gpu_pod, unlimited_queue
from tests.log_checks import assert_sound

PODS = 6


@pytest.mark.kafka
async def test_pods_are_bound_through_a_sasl_ssl_kafka(
    secure_kafka: KafkaSettings, topic_prefix: str, tmp_path: Path
) -> None:
    scenario = tmp_path / "cluster.yaml"
    scenario.write_text(gpu_nodes(2, 4) + "---\n" + unlimited_queue("q"))
    options = PipelineOptions(
        scenario=scenario,
        kafka=secure_kafka,
        engine="kafka",
        topic_prefix=topic_prefix,
        tick_interval_s=None,
        binder_subprocess=True,
    )
    names = {f"s-{i}" for i in range(PODS)}
    async with Pipeline(options) as pipeline, api_client(pipeline.cluster.url or "") as api:
        assert pipeline.kafka is not None and pipeline.kafka.security_protocol == "SASL_SSL"
        env = pipeline.processor_env()
        assert env["KAI_STREAM_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
        assert env["KAI_STREAM_KAFKA_SSL_CAFILE"] == secure_kafka.ssl_cafile
        core = client.CoreV1Api(api)
        for name in sorted(names):
            await create_pod(core, "sec", gpu_pod(name, "sec", 1, queue="q"))
        await pipeline.wait_quiescent(timeout_s=180)
        assert pipeline.failed() is None
        bound = {b.name for b in pipeline.cluster.bindings if b.code == 201}
        assert bound == names, pipeline.processor_output()
        history = await read_broker(pipeline.kafka, pipeline.names)
        assert history.decisions >= PODS
        assert_sound(history)
