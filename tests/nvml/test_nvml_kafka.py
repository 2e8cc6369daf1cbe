"""The agent's Kafka sink on the real embedded broker: the reading lands on its pool's partition of cluster-events."""

from __future__ import annotations

import pynvml

from kai_stream.connectors.nvml import AgentConfig, GpuAgent, GpuReader, kafka_sink
from kai_stream.core.events import loads_cluster_event
from kai_stream.kafka import make_producer, partition_for, read_topic
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames, load_specs

from .recorded import Gpu, RecordedNvml, nvml_error


async def test_unhealthy_reading_is_published_keyed_by_pool(kafka_settings: KafkaSettings, topics: TopicNames) -> None:
    reader = GpuReader(RecordedNvml([Gpu(uuid="GPU-1"), Gpu(uuid="GPU-2", ecc=3)]))
    reader.open()
    producer = make_producer(kafka_settings)
    await producer.start()
    try:
        config = AgentConfig(node="n7", pool="pool-b", topic=topics.cluster_events)
        agent = GpuAgent(reader, config, kafka_sink(producer, topics.cluster_events), clock=lambda: 5.0)
        sent = await agent.poll_once()
        reader.api.gpus[0].memory = nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)  # type: ignore[attr-defined]
        lost = await agent.poll_once()
    finally:
        await producer.stop()
    records = await read_topic(kafka_settings, topics.cluster_events)
    assert [loads_cluster_event(r.value) for r in records] == [sent, lost]
    (spec,) = [spec for spec in load_specs() if spec.name == "cluster-events"]
    assert {(r.key, r.partition) for r in records} == {(b"pool-b", partition_for("pool-b", spec.partitions))}
    assert lost is not None and [g.healthy for g in lost.gpus] == [False, False]
