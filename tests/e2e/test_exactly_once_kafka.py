"""Exactly once on Apache Kafka: the processor is SIGKILLed three times while it works through a burst of pods, and
restarted each time (from its engine snapshots, taken every 0.2 s here).

Each partition batch is one transaction (``kai_stream/streams/exactly_once.py``), so a kill mid-batch leaves its
decisions aborted: read committed, the log holds every pod's decision once, no partial cycle, and replaying the
recorded log rebuilds every decision byte for byte; the log invariant checker finds no violation. Read
uncommitted, the aborted records are there (printed: how many the kills cut off). The processor's log shows that
a restart after a committed snapshot resumed from it rather than from offset 0.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from kubernetes_asyncio import client

from kai_stream.connectors.simcluster.client import api_client
from kai_stream.core.events import BindRequested
from kai_stream.history.reader import read_broker
from kai_stream.kafka import assign_from_start, make_consumer, read_to_end, read_topic
from kai_stream.pipeline import Pipeline, PipelineOptions
from kai_stream.settings import KafkaSettings
from tests.cluster_objects import create_pod, gpu_nodes, gpu_pod, unlimited_queue
from tests.log_checks import assert_chained, assert_sound

NODES, GPUS, PODS = 40, 8, 240  # 480 GPUs asked of 320: some pods stay pending
MAX_PODS = 2000
CLUSTER = gpu_nodes(NODES, GPUS) + "---\n" + unlimited_queue("q")


@pytest.mark.kafka
async def test_processor_killed_mid_burst_decides_every_pod_exactly_once(
    kafka_broker: str, topic_prefix: str, tmp_path: Path
) -> None:
    scenario = tmp_path / "cluster.yaml"
    scenario.write_text(CLUSTER)
    options = PipelineOptions(
        scenario=scenario,
        bootstrap_servers=kafka_broker,
        engine="kafka",
        topic_prefix=topic_prefix,
        tick_interval_s=None,
        processor_env={"KAI_STREAM_PROCESSOR_SNAPSHOT_INTERVAL_S": "0.2", "KAI_STREAM_PROCESSOR_LOG_LEVEL": "INFO"},
    )
    names = [f"p-{i}" for i in range(PODS)]
    async with Pipeline(options) as pipeline, api_client(pipeline.cluster.url or "") as api:
        core = client.CoreV1Api(api)
        assert pipeline.tail is not None and pipeline.kafka is not None

        killed = asyncio.Event()

        async def create() -> None:
            """PODS pods, then more until the kills are done: a transaction is open only a few milliseconds of
            each batch, so the kills may need more batches than PODS pods make."""
            i = 0
            while i < PODS or (not killed.is_set() and i < MAX_PODS):
                name = f"p-{i}"
                await create_pod(core, "eos", gpu_pod(name, "eos", 1 + i % 3, queue="q"))
                if i >= len(names):
                    names.append(name)
                i += 1
                await asyncio.sleep(0.03)

        creating = asyncio.create_task(create())
        try:
            kills = await _kill_on_uncommitted(pipeline, at=(PODS // 8, PODS // 4, PODS // 2))
        finally:
            killed.set()
        await creating
        await pipeline.wait_quiescent(timeout_s=120)
        # a kill once all is committed (snapshots included): the restart resumes from the snapshot
        pipeline.stop_processor(kill=True)
        kills += 1
        names += ["late-0", "late-1"]
        for name in names[-2:]:
            await create_pod(core, "eos", gpu_pod(name, "eos", 1, queue="q"))
        pipeline.start_processor()
        await pipeline.wait_quiescent(timeout_s=120)

        history = await read_broker(pipeline.kafka, pipeline.names)
        decisions = pipeline.tail.all_decisions()
        assert len({d.decision_id for d in decisions}) == len(decisions)
        binds = Counter(d.name for d in decisions if isinstance(d, BindRequested))
        assert binds and set(binds.values()) == {1}, binds
        assert_chained(decisions)
        report = assert_sound(history)
        assert report.identical == history.decisions == len(decisions)
        posts = Counter(b.name for b in pipeline.cluster.bindings if b.code == 201)
        assert set(posts.values()) == {1}, posts

        assert {d.name for d in decisions} == set(names)  # every pod decided (bound or pending): none lost

        committed = await read_topic(pipeline.kafka, pipeline.names.decisions)
        everything = await _read_uncommitted(pipeline.kafka, pipeline.names.decisions)
        log = pipeline.processor_output(None)
        resumed = log.count("after its snapshot at offset")
        aborted = len(everything) - len(committed)
        print(
            f"\nexactly once: {kills} kills, {len(decisions)} decisions committed once, {aborted}"
            f" aborted records (read uncommitted), {resumed} rebuilds resumed from a snapshot"
        )
        assert aborted > 0  # the kills did cut transactions short: their records are in the log, aborted
        assert resumed >= 1, "\n".join(line for line in log.splitlines() if "rebuilt" in line or "WARN" in line)


async def _kill_on_uncommitted(pipeline: Pipeline, at: tuple[int, ...]) -> int:
    """SIGKILL the processor inside an open transaction once the log holds ``at[i]`` decision records; restart it.

    A decision record seen read uncommitted may already be committed by the time a signal lands, so each try
    first freezes the processor (SIGSTOP), lets what it had sent settle, and kills it only if a partition's last
    stable offset stays below its high-watermark (its transaction is open); otherwise it resumes (SIGCONT) and
    the next record is tried. Every kill therefore cuts a transaction short."""
    assert pipeline.kafka is not None
    watcher = make_consumer(pipeline.kafka, group_id=None, isolation_level="read_uncommitted", fetch_max_wait_ms=5)
    stable = make_consumer(pipeline.kafka, group_id=None, isolation_level="read_committed", fetch_max_wait_ms=5)
    await watcher.start()
    await stable.start()
    try:
        await assign_from_start(watcher, pipeline.names.decisions)
        await assign_from_start(stable, pipeline.names.decisions)
        seen, kills, deadline = 0, 0, time.monotonic() + 150
        while kills < len(at):
            assert time.monotonic() < deadline, f"{seen} decision records, {kills} kills inside a transaction"
            batches = await watcher.getmany(timeout_ms=20)
            seen += sum(len(records) for records in batches.values())
            if not batches or seen < at[kills]:
                continue
            pipeline.signal_processor(signal.SIGSTOP)
            if await _transaction_open(stable) and await _transaction_open(stable):
                pipeline.stop_processor(kill=True)
                kills += 1
                pipeline.start_processor()
            else:
                pipeline.signal_processor(signal.SIGCONT)
        return kills
    finally:
        await watcher.stop()
        await stable.stop()


async def _transaction_open(stable: AIOKafkaConsumer) -> bool:
    """After a settling pause: does any partition hold records past its last stable offset?"""
    await asyncio.sleep(0.25)
    for _ in range(3):
        await stable.getmany(timeout_ms=30)
    for tp in stable.assignment():
        lso, high = stable.last_stable_offset(tp), stable.highwater(tp)
        if lso is not None and high is not None and lso < high:
            return True
    return False


async def _read_uncommitted(kafka: KafkaSettings, topic: str) -> list[Any]:
    consumer = make_consumer(kafka, group_id=None, isolation_level="read_uncommitted")
    await consumer.start()
    try:
        await assign_from_start(consumer, topic)
        return await read_to_end(consumer)
    finally:
        await consumer.stop()
