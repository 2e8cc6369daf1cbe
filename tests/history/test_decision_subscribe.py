"""Decision subscriptions on the real broker: client-side filters, own consumer group, start at the end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import orjson
import pytest

from kai_stream.core.events import BindRequested, Decision, EvictionRequested, PodPending, dumps, stable_id
from kai_stream.kafka import make_producer, send_keyed
from kai_stream.settings import KafkaSettings
from kai_stream.subscribe import subscribe
from kai_stream.topics import TopicNames


def _decision(i: int, queue: str, namespace: str, kind: str) -> Decision:
    common = dict(
        decision_id=stable_id("default", str(i), f"u{i}", kind),
        ts=float(i),
        input_offset=i,
        config_hash="c",
        code_version="t",
        action="allocate",
        namespace=namespace,
        name=f"p{i}",
        uid=f"u{i}",
        job=f"{namespace}/p{i}",
        queue=queue,
    )
    if kind == "bind":
        return BindRequested(node="n1", **common)
    if kind == "evict":
        return EvictionRequested(**{**common, "action": "reclaim"})
    return PodPending(code="NoNodeFits", **common)


async def _publish(settings: KafkaSettings, topic: str, decisions: list[Decision]) -> None:
    producer = make_producer(settings)
    await producer.start()
    try:
        for d in decisions:
            await (await send_keyed(producer, topic, d.pool, dumps(d)))
    finally:
        await producer.stop()


async def _take(it: AsyncIterator[Decision], n: int) -> list[Decision]:
    out: list[Decision] = []
    async for d in it:
        out.append(d)
        if len(out) == n:
            break
    return out


async def test_subscribe_filters_and_starts_at_the_end(kafka_settings: KafkaSettings, topics: TopicNames) -> None:
    kinds = ["bind", "evict", "pending"]
    first = [_decision(i, f"q{i % 2}", f"ns{i % 3}", kinds[i % 3]) for i in range(12)]
    await _publish(kafka_settings, topics.decisions, first)

    wanted = [d for d in first if d.queue == "q0" and isinstance(d, BindRequested)]
    assert wanted
    sub = subscribe(kafka_settings, queue="q0", kind="bind", from_beginning=True, names=topics, poll_ms=50)
    got = await asyncio.wait_for(_take(sub, len(wanted)), 20)
    await sub.aclose()
    assert [d.decision_id for d in got] == [d.decision_id for d in wanted]

    live = subscribe(kafka_settings, namespace="ns1", names=topics, poll_ms=50)
    pending = asyncio.ensure_future(_take(live, 2))
    await asyncio.sleep(1.5)  # the subscriber has joined and sits at the end; old ns1 decisions are not re-sent
    later = [_decision(i, "q9", "ns1", kinds[i % 3]) for i in range(100, 102)]
    await _publish(kafka_settings, topics.decisions, later)
    got_live = await asyncio.wait_for(pending, 20)
    await live.aclose()
    assert [d.decision_id for d in got_live] == [d.decision_id for d in later]


def test_tail_decisions_cli_filters_by_kind(
    kafka_settings: KafkaSettings, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from kai_stream.cli import _register, app
    from kai_stream.topics import create_topics

    names = TopicNames.with_prefix(topic_prefix)
    asyncio.run(create_topics(kafka_settings, names=names))
    decisions = [_decision(i, "q0", "ns", ["bind", "evict", "pending"][i % 3]) for i in range(9)]
    asyncio.run(_publish(kafka_settings, names.decisions, decisions))
    monkeypatch.setenv("KAI_STREAM_KAFKA_SESSION_TIMEOUT_MS", "2000")  # quick group join on the embedded broker
    monkeypatch.setenv("KAI_STREAM_KAFKA_HEARTBEAT_INTERVAL_MS", "300")
    _register()
    args = ["tail", "decisions", "--from-beginning", "--kind", "evict", "--limit", "3", "--json"]
    args += ["--bootstrap-servers", kafka_settings.bootstrap_servers, "--topic-prefix", topic_prefix]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert [d["decision_id"] for d in lines] == [d.decision_id for d in decisions if isinstance(d, EvictionRequested)]
    bad = CliRunner().invoke(app, ["tail", "decisions", "--kind", "delete"])
    assert bad.exit_code != 0 and "unknown kind" in bad.output


async def test_two_concurrent_subscribers_each_get_every_matching_decision(
    kafka_settings: KafkaSettings, topics: TopicNames
) -> None:
    """Each subscriber is its own consumer group: two at once on one topic both see every partition's decisions
    (in one shared group the partitions, and so the decisions, would be split between them)."""
    from kai_stream.kafka import partition_for
    from kai_stream.subscribe import high_watermarks

    partitions = len(await high_watermarks(kafka_settings, topics.decisions))
    pools = ["blue", "green", "red", "default"]
    assert len({partition_for(p, partitions) for p in pools}) >= 3  # the decisions span several partitions
    kinds = ["bind", "evict", "pending"]
    first = [_decision(i, f"q{i % 2}", "ns", kinds[i % 3]).model_copy(update={"pool": pools[i % 4]}) for i in range(24)]
    await _publish(kafka_settings, topics.decisions, first)

    def order(ds: Sequence[Decision]) -> dict[str, list[str]]:  # per pool (= per partition), log order
        return {p: [d.decision_id for d in ds if d.pool == p] for p in pools}

    want_q0 = [d for d in first if d.queue == "q0"]
    want_evict = [d for d in first if isinstance(d, EvictionRequested)]
    assert len(want_q0) == 12 and len(want_evict) == 8 and {d.pool for d in want_evict} == set(pools)
    by_queue = subscribe(kafka_settings, queue="q0", from_beginning=True, names=topics, poll_ms=50)
    by_kind = subscribe(kafka_settings, kind="evict", from_beginning=True, names=topics, poll_ms=50)
    got_q0, got_evict = await asyncio.wait_for(
        asyncio.gather(_take(by_queue, len(want_q0)), _take(by_kind, len(want_evict))), 30
    )
    assert order(got_q0) == order(want_q0)
    assert order(got_evict) == order(want_evict)

    # both still subscribed: a later decision matching both filters reaches both
    later = _decision(200, "q0", "ns", "evict").model_copy(update={"pool": "green"})
    await _publish(kafka_settings, topics.decisions, [later])
    again = await asyncio.wait_for(asyncio.gather(_take(by_queue, 1), _take(by_kind, 1)), 20)
    await by_queue.aclose()
    await by_kind.aclose()
    assert [d.decision_id for got in again for d in got] == [later.decision_id] * 2


def test_a_subscription_yields_an_offset_or_a_decision_id_once() -> None:
    """A rebalance before a commit seeks a partition back; a processor without transactions republishes a decision
    at a new offset: neither reaches the caller twice, and the id window forgets the oldest ids first."""
    from kai_stream.subscribe import _Delivered

    seen = _Delivered(window=2)
    assert [seen.first_time(0, o) for o in (0, 1, 2)] == [True] * 3
    assert [seen.first_time(0, o) for o in (0, 2, 3)] == [False, False, True]  # sought back to 0: only 3 is new
    assert seen.first_time(1, 0)  # partitions are apart
    assert [seen.new_decision(d) for d in ("a", "b", "a")] == [True, True, False]
    assert seen.new_decision("c") and seen.new_decision("a")  # "a" fell out of the window of two
