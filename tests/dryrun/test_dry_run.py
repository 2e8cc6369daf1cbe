"""`kai-stream dry-run`: a pod that fits now (its node named), one that fits nowhere (the core's pending reason), and
one that would reclaim GPUs (its victims named), from a scenario, a recorded history and the live log on the broker;
the state it is run on is not changed and nothing is published."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from typer.testing import CliRunner

from kai_stream.cli import _register, app
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import EvictionRequested, Model, PodPending, dumps
from kai_stream.core.manifests import load_scenario
from kai_stream.dryrun import dry_run, pod_events, scenario_state
from kai_stream.history.export import write_history
from kai_stream.kafka import make_producer, partition_for, read_topic
from kai_stream.replay.engine import run_engine
from kai_stream.settings import KafkaSettings
from kai_stream.simulate import simulate
from kai_stream.streams.runtime import InRecord, SchedulerRuntime
from kai_stream.topics import TopicNames

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _cluster(drop: set[str]) -> str:
    """examples/reclaim.yaml (two 2-GPU nodes; qb's b1, b2 on n1 and b3, b4 on n2) without the named pods."""
    docs = (EXAMPLES / "reclaim.yaml").read_text().split("\n---\n")
    return "\n---\n".join(d for d in docs if not any(f"name: {name}\n" in d for name in drop))


def _pod(name: str, queue: str, gpus: int) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  labels: {{kai.scheduler/queue: {queue}}}
spec:
  schedulerName: kai-scheduler
  priorityClassName: train
  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]
"""


def _invoke(tmp_path: Path, pod: str, *source: str) -> dict[str, Any]:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(pod)
    _register()
    result = CliRunner().invoke(app, ["dry-run", str(manifest), *source, "--json"])
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = orjson.loads(result.stdout)
    return out


def _scenario(tmp_path: Path, drop: set[str]) -> list[str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(_cluster(drop))
    return ["--scenario", str(path)]


def test_a_pod_that_fits_gets_the_free_gpu(tmp_path: Path) -> None:
    out = _invoke(tmp_path, _pod("probe", "qa", 1), *_scenario(tmp_path, {"a1", "a2", "b4"}))
    assert out["outcome"] == "bind" and out["fits"]
    assert out["node"] == "n2" and out["gpu_indices"] == [1], "b3 holds n2's GPU 0"
    assert out["evicts"] == []


def test_a_pod_that_fits_nowhere_gets_the_cores_reason(tmp_path: Path) -> None:
    out = _invoke(tmp_path, _pod("big", "qa", 3), *_scenario(tmp_path, {"a1", "a2", "b4"}))
    assert out["outcome"] == "pending" and not out["fits"] and out["node"] is None
    assert out["code"] == "NotEnoughOverQuotaShare" and "queue qa" in out["reason"]
    # the reason a whole simulation gives the pod when it is in the scenario from the start
    scenario = _cluster({"a1", "a2", "b4"}) + "\n---\n" + _pod("big", "qa", 3)
    together = simulate(load_scenario(scenario), SchedulerConfig())
    pending = next(d for d in together.decisions if isinstance(d, PodPending) and d.name == "big")
    assert (out["code"], out["reason"]) == (pending.code, pending.reason)
    unknown = _invoke(tmp_path, _pod("lost", "nope", 1), *_scenario(tmp_path, {"a1", "a2", "b4"}))
    assert (unknown["outcome"], unknown["code"]) == ("pending", "UnknownQueue")


def test_a_pod_under_its_quota_would_reclaim_from_the_queue_over_it(tmp_path: Path) -> None:
    out = _invoke(tmp_path, _pod("probe", "qa", 1), *_scenario(tmp_path, {"a1", "a2"}))
    assert out["outcome"] == "pipeline" and out["action"] == "reclaim"
    assert [(v["pod"], v["queue"], v["action"]) for v in out["evicts"]] == [("ml/b4", "qb", "reclaim")]
    assert out["node"] == "n2"

    # the same cluster recorded as a history (events and published decisions)
    history = tmp_path / "history"
    write_history(history, [run_engine(load_scenario(_cluster({"a1", "a2"})), SchedulerConfig()).log])
    from_log = _invoke(tmp_path, _pod("probe", "qa", 1), "--from-history", str(history))
    assert from_log["evicts"] == out["evicts"] and from_log["node"] == "n2"


def test_the_state_is_left_as_it_was(tmp_path: Path) -> None:
    config = SchedulerConfig()
    state = scenario_state(load_scenario(_cluster({"a1", "a2"})), config)
    before = (state.offset, dict(state.pods), dict(state.evicting), dict(state.pipelined))
    result = dry_run(state, config, pod_events(_pod("probe", "qa", 1), config, state.now))
    assert result.victims
    assert (state.offset, dict(state.pods), dict(state.evicting), dict(state.pipelined)) == before


async def test_dry_run_on_the_live_log(
    kafka_settings: KafkaSettings, topics: TopicNames, topic_prefix: str, tmp_path: Path
) -> None:
    partition = partition_for("default", 8)
    producer = make_producer(kafka_settings)
    await producer.start()

    async def send(topic: str, target: int, key: bytes, record: Model) -> Any:
        return await producer.send(topic, dumps(record), key=key, partition=target)

    try:
        for event in load_scenario(_cluster({"a2"})):
            await producer.send_and_wait(topics.cluster_events, dumps(event), key=b"default", partition=partition)
        records = [
            InRecord(r.partition, r.offset, r.key, r.value, r.timestamp)
            for r in await read_topic(kafka_settings, topics.cluster_events)
        ]
        runtime = SchedulerRuntime(kafka_settings, topics, SchedulerConfig(), send, partitions=8)
        decided = [o.record for o in await runtime.process(records)]
        assert [(d.type, d.name) for d in decided if isinstance(d, EvictionRequested)] == [("EvictionRequested", "b4")]
    finally:
        await producer.stop()
    published = len(await read_topic(kafka_settings, topics.decisions))

    manifest = tmp_path / "pod.yaml"
    manifest.write_text(_pod("probe", "qa", 1))
    _register()
    argv = ["dry-run", str(manifest), "--bootstrap-servers", kafka_settings.bootstrap_servers,
            "--topic-prefix", topic_prefix, "--json"]
    result = await asyncio.to_thread(CliRunner().invoke, app, argv)
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    # b4 is already being evicted for a1 (a decision on the log): the probe needs another of qb's pods
    assert (out["outcome"], out["action"], out["node"]) == ("pipeline", "reclaim", "n2")
    assert [(v["pod"], v["queue"]) for v in out["evicts"]] == [("ml/b3", "qb")]
    assert len(await read_topic(kafka_settings, topics.decisions)) == published
