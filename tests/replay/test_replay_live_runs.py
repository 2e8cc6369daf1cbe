"""Exact replay under varied timing: the demo scenario played by the real pipeline (Tansu over TCP, simulated
cluster over HTTP with a 30 s termination grace, connector, faust processor, binder) five times, each with other
tick rates, producer lingers, cycle batching and kubelet speeds, so that cycles land on other offsets and
batches; every recorded decision must replay byte for byte, its hash chain must verify."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from kai_stream.audit import verify_chain
from kai_stream.history.reader import read_broker
from kai_stream.pipeline import Pipeline, PipelineOptions
from kai_stream.replay.testing import assert_replays_identically

ROOT = Path(__file__).resolve().parents[2]

VARIANTS = [
    # tick interval s, feedback linger ms, processor batch window s, max cycle delay s, time scale
    (0.2, 0, 0.001, 0.0, 0.05),
    (0.5, 25, 0.005, 0.25, 0.08),
    (0.1, 50, 0.02, 0.05, 0.05),
    (1.0, 5, 0.002, 0.5, 0.1),
    (0.3, 100, 0.05, 0.1, 0.06),
]


@pytest.mark.parametrize(("tick", "linger", "within", "delay", "scale"), VARIANTS)
async def test_live_demo_history_replays_identically(
    broker: str, monkeypatch: pytest.MonkeyPatch, tick: float, linger: int, within: float, delay: float, scale: float
) -> None:
    monkeypatch.setenv("KAI_STREAM_KAFKA_FEEDBACK_LINGER_MS", str(linger))
    options = PipelineOptions(
        scenario=ROOT / "examples" / "demo.yaml",
        bootstrap_servers=broker,
        topic_prefix=f"rl{uuid.uuid4().hex[:8]}-",
        tick_interval_s=tick,
        time_scale=scale,
        termination_grace=30.0,
        processor_env={
            "KAI_STREAM_PROCESSOR_BATCH_WITHIN_S": str(within),
            "KAI_STREAM_PROCESSOR_MAX_CYCLE_DELAY_S": str(delay),
        },
    )
    async with Pipeline(options) as pipeline:
        assert pipeline.tail is not None
        await asyncio.sleep(6.0)
        assert pipeline.failed() is None
        await pipeline.wait_caught_up(timeout_s=60)
    assert pipeline.kafka is not None
    history = await read_broker(pipeline.kafka, pipeline.names)  # once stopped: a log that grows no more

    assert history.decisions > 16, "the run decided too little to prove anything"
    report = assert_replays_identically(history)
    assert report.identical == history.decisions
    for log in history.pools.values():
        assert verify_chain(log.decisions, offsets=log.decision_offsets).ok
