"""A scheduling cycle reaches the decisions topic whole or not at all: a processor killed (-9) while it publishes
a cycle leaves either none of the cycle's records or all of them, and a restarted processor then publishes exactly
what a replay of the log rebuilds. Publishing record by record (as before) leaves half a cycle, and the log then
differs from its replay: the test shows both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import kai_stream
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    ClusterEvent,
    NodeObserved,
    NodeSpec,
    PodObserved,
    PodSpec,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    Resources,
    Tick,
    dumps,
    loads_cluster_event,
)
from kai_stream.kafka import UNIT_MAX_BYTES, make_producer, partition_for, read_topic
from kai_stream.settings import KafkaSettings
from kai_stream.streams.engine import PartitionEngine
from kai_stream.topics import TopicNames, load_specs

ROOT = Path(__file__).resolve().parents[2]
PODS = 3000
PARTITIONS = 8
HOME = partition_for("default", PARTITIONS)


def _events() -> list[ClusterEvent]:
    node = NodeSpec(name="n1", allocatable=Resources(gpu_milli=64_000, cpu_milli=10**6, memory=2**40))
    queue = QueueSpec(name="q", resources=QueueResources(gpu=QueueResource(quota=-1)))
    pods = [
        PodObserved(
            event_id=f"p{i}",
            ts=1.0,
            pod=PodSpec(
                namespace="ns", name=f"p{i:05d}", uid=f"u{i:05d}", queue="q", created=float(i),
                requests=Resources(gpu_milli=1000),
            ),
        )
        for i in range(PODS)
    ]
    return [
        NodeObserved(event_id="n", ts=0.0, node=node),
        QueueObserved(event_id="q", ts=0.0, queue=queue),
        *pods,
        Tick(event_id="t", ts=2.0),
    ]


async def _publish_events(settings: KafkaSettings, names: TopicNames) -> None:
    producer = make_producer(settings)
    await producer.start()
    try:
        for event in _events():
            await producer.send(names.cluster_events, dumps(event), key=b"default", partition=HOME)
        await producer.flush()
    finally:
        await producer.stop()


def _replayed(events: list[ClusterEvent]) -> list[bytes]:
    """What the pure core publishes for these events: the records a replay rebuilds."""
    engine = PartitionEngine.for_config(HOME, SchedulerConfig(), kai_stream.__version__)
    for offset, event in enumerate(events):
        engine.fold(offset, event)
    return [dumps(item.record) for item in engine.cycle(["default"])]


def _run_until(settings: KafkaSettings, prefix: str, mode: str, kill_at: str) -> None:
    """Start a publisher process; kill -9 it when it prints a line starting with ``kill_at``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.streams.cycle_publisher", settings.bootstrap_servers, prefix, mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(kill_at):
                break
        else:
            raise AssertionError(f"publisher exited ({proc.wait()}) before printing {kill_at!r}")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


async def _decisions(settings: KafkaSettings, names: TopicNames) -> list[bytes]:
    return [r.value or b"" for r in await read_topic(settings, names.decisions) if r.partition == HOME]


def test_the_decisions_topic_holds_a_cycle_of_64_mib() -> None:
    [spec] = [s for s in load_specs() if s.name == "decisions"]
    assert spec.max_message_bytes is not None and spec.max_message_bytes > UNIT_MAX_BYTES


@pytest.mark.parametrize("kill_at", ["submitted", "delivered"])
async def test_a_kill_while_publishing_leaves_all_or_none_of_the_cycle(
    kafka_settings: KafkaSettings, topics: TopicNames, topic_prefix: str, kill_at: str
) -> None:
    await _publish_events(kafka_settings, topics)
    events = [loads_cluster_event(r.value or b"") for r in await read_topic(kafka_settings, topics.cluster_events)]
    expected = _replayed(events)
    assert len(expected) == PODS + 2  # ConfigRecorded, a decision per pod, FairShareRecorded
    _run_until(kafka_settings, topic_prefix, "unit", kill_at)
    after_kill = await _decisions(kafka_settings, topics)
    assert after_kill in ([], expected), f"{len(after_kill)} of {len(expected)} records of the cycle"
    if kill_at == "delivered":
        assert after_kill == expected
    _run_until(kafka_settings, topic_prefix, "unit", "done")
    assert await _decisions(kafka_settings, topics) == expected


async def test_record_by_record_a_kill_leaves_half_a_cycle_that_replay_does_not_rebuild(
    kafka_settings: KafkaSettings, topics: TopicNames, topic_prefix: str
) -> None:
    await _publish_events(kafka_settings, topics)
    events = [loads_cluster_event(r.value or b"") for r in await read_topic(kafka_settings, topics.cluster_events)]
    expected = _replayed(events)
    _run_until(kafka_settings, topic_prefix, "records", "delivered")
    half = await _decisions(kafka_settings, topics)
    assert 0 < len(half) < len(expected) and half == expected[: len(half)]
    _run_until(kafka_settings, topic_prefix, "records", "done")
    assert await _decisions(kafka_settings, topics) != expected
