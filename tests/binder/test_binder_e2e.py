"""End to end over the real joints: decisions produced to the real Tansu broker -> binder (aiokafka) ->
pods bound in the simulated cluster over HTTP (kubernetes-asyncio); outcomes back on bind-results and
cluster-events. The binder is killed mid-run and restarted: nothing is lost, nothing is bound twice."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable

from aiokafka import TopicPartition

from kai_stream.binder import RetryPolicy, run_binder
from kai_stream.connectors.simcluster import SimCluster, kube_client_config
from kai_stream.core.events import (
    ConfigRecorded,
    DeadLetter,
    PodBound,
    loads_any,
)
from kai_stream.kafka import make_consumer, make_producer, partition_for, publish, read_topic, send_keyed
from kai_stream.observability import BINDER_OUTCOMES
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames

from .builders import bind, node, pending, pod
from .proxy import Proxy

N_PODS = 40


def _node_of(sim: SimCluster, name: str) -> str | None:
    found = sim.find(f"pods/team-a/{name}")
    return None if found is None else found["spec"].get("nodeName")


async def _committed(settings: KafkaSettings, topic: str, group: str) -> dict[int, int | None]:
    consumer = make_consumer(settings, group_id=group)
    await consumer.start()
    try:
        await consumer.topics()
        partitions = sorted(consumer.partitions_for_topic(topic) or ())
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in partitions}
    finally:
        await consumer.stop()


async def test_binder_survives_a_kill_without_losing_or_double_binding(
    kafka_settings: KafkaSettings, topics: TopicNames, sim: SimCluster, flaky: Proxy
) -> None:
    await sim.create(node("n1", gpus=N_PODS // 2))
    await sim.create(node("n2", gpus=N_PODS // 2))
    pods = [await sim.create(pod(f"p{i:02d}")) for i in range(N_PODS)]
    waiting = await sim.create(pod("waiting"))
    decisions = [bind(p, f"n{1 + i % 2}", offset=i, gpus=(i // 2,)) for i, p in enumerate(pods)]

    producer = make_producer(kafka_settings)
    await producer.start()
    try:
        await publish(producer, topics.decisions, ConfigRecorded(ts=0, config_hash="c", code_version="t", config="{}"),
                      pool="default")
        await (await send_keyed(producer, topics.decisions, "default", b'{"type": "Garbage"}'))
        await publish(producer, topics.decisions, pending(waiting, "no node has 8 free GPUs"), pool="default")
        for decision in decisions:
            await publish(producer, topics.decisions, decision, pool=decision.pool)
    finally:
        await producer.stop()

    flaky.delay_s = 0.01
    config = kube_client_config(flaky.url)
    group = f"binder-{uuid.uuid4().hex[:8]}"

    def start() -> asyncio.Task[None]:
        return asyncio.create_task(
            run_binder(kafka_settings, config, topics=topics, group_id=group, concurrency=2,
                       retry=RetryPolicy(attempts=3, base_delay_s=0.01))
        )

    bound_before = BINDER_OUTCOMES.labels(kind="PodBound")._value.get()
    first = start()
    await sim.wait_until(lambda: sim.binding_count >= 10, timeout=20)
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    killed_at = sim.binding_count
    assert killed_at < N_PODS, "the binder finished before it was killed; the test would prove nothing"

    stop = asyncio.Event()
    second = asyncio.create_task(
        run_binder(kafka_settings, config, topics=topics, group_id=group, stop_event=stop, concurrency=8)
    )
    try:
        await sim.wait_until(lambda: all(_node_of(sim, d.name) == d.node for d in decisions), timeout=20)
        outcomes = await _wait_for_outcomes(kafka_settings, topics.bind_results, {d.decision_id for d in decisions})
    finally:
        stop.set()
        await asyncio.wait_for(second, 10)

    posts = Counter((b.name, b.code) for b in sim.bindings)
    assert all(posts[(d.name, 201)] == 1 for d in decisions), posts
    assert sum(posts.values()) == N_PODS, "a pod got a second binding POST"
    for d in decisions:
        stored = sim.get(f"pods/team-a/{d.name}")
        assert stored["metadata"]["annotations"]["kai.scheduler/gpu-indices"] == str(d.gpu_indices[0])

    assert BINDER_OUTCOMES.labels(kind="PodBound")._value.get() - bound_before >= N_PODS
    fresh = [o for o in outcomes if not o.already]
    assert {o.decision_id for o in outcomes} == {d.decision_id for d in decisions}
    assert len(fresh) <= N_PODS and len({o.decision_id for o in fresh}) == len(fresh)

    folded = [loads_any(r.value) for r in await read_topic(kafka_settings, topics.cluster_events)]
    assert {o.decision_id for o in folded if isinstance(o, PodBound)} == {d.decision_id for d in decisions}

    letters = [DeadLetter.model_validate_json(r.value) for r in await read_topic(kafka_settings, topics.dead_letter)]
    assert len({letter.event_id for letter in letters}) == 1, "one bad record (re-delivery may repeat it)"
    assert letters[0].value_text == '{"type": "Garbage"}'
    assert "binder" in letters[0].reason and letters[0].topic == topics.decisions

    waiting_now = sim.get("pods/team-a/waiting")
    [scheduled] = [c for c in waiting_now["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (scheduled["status"], scheduled["message"]) == ("False", "no node has 8 free GPUs")

    committed = await _committed(kafka_settings, topics.decisions, group)
    ends = Counter(r.partition for r in await read_topic(kafka_settings, topics.decisions))
    assert {p: off for p, off in committed.items() if off is not None} == dict(ends)


async def _wait_for_outcomes(settings: KafkaSettings, topic: str, wanted: set[str]) -> list[PodBound]:
    async with asyncio.timeout(20):
        while True:
            records = await read_topic(settings, topic)
            outcomes = [o for o in (loads_any(r.value) for r in records) if isinstance(o, PodBound)]
            if {o.decision_id for o in outcomes} >= wanted:
                return outcomes
            await asyncio.sleep(0.1)


async def test_two_binders_share_pools_across_a_rebalance_without_double_binding(
    kafka_settings: KafkaSettings, topics: TopicNames, sim: SimCluster, proxies: Callable[[], Awaitable[Proxy]]
) -> None:
    await sim.create(node("n1"))
    pods = [await sim.create(pod(f"r{i:02d}")) for i in range(64)]
    decisions = [bind(p, "n1", offset=i, pool=f"pool-{i % 8}") for i, p in enumerate(pods)]
    assert len({partition_for(d.pool, 8) for d in decisions}) >= 4
    producer = make_producer(kafka_settings)
    await producer.start()
    try:
        for decision in decisions:
            await publish(producer, topics.decisions, decision, pool=decision.pool)
    finally:
        await producer.stop()

    first_api, second_api = await proxies(), await proxies()
    # slow enough that the first binder cannot finish its share of any partition the rebalance hands to the
    # second one (8 decisions per partition; it binds at most ~20 while the second waits up to 20 s)
    first_api.delay_s = 1.0
    group = f"binder-{uuid.uuid4().hex[:8]}"
    stops = [asyncio.Event(), asyncio.Event()]

    def start(api: Proxy, stop: asyncio.Event) -> asyncio.Task[None]:
        return asyncio.create_task(
            run_binder(kafka_settings, kube_client_config(api.url), topics=topics, group_id=group, stop_event=stop,
                       concurrency=1, max_batch=1)
        )

    tasks = [start(first_api, stops[0])]
    await sim.wait_until(lambda: sim.binding_count >= 1, timeout=20)
    tasks.append(start(second_api, stops[1]))
    try:
        async with asyncio.timeout(20):
            while not any(path.endswith("/binding") for _, path, _ in second_api.forwarded):
                await asyncio.sleep(0.05)
        first_api.delay_s = 0.0
        await sim.wait_until(lambda: all(_node_of(sim, d.name) == "n1" for d in decisions), timeout=30)
    finally:
        for stop in stops:
            stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 15)

    posts = Counter(b.name for b in sim.bindings)
    assert posts == Counter(d.name for d in decisions), "every pod exactly one binding POST"
    by_first = {path for method, path, code in first_api.forwarded if path.endswith("/binding")}
    by_second = {path for method, path, code in second_api.forwarded if path.endswith("/binding")}
    assert by_first and by_second, "both binders should have applied part of the work"
    assert not by_first & by_second
