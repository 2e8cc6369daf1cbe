"""The event schema round-trips through its canonical bytes, and bad bytes are rejected clearly."""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kai_stream.core.events import (
    ID_NAMESPACE,
    BindRequested,
    MalformedEvent,
    NodeObserved,
    NodeSpec,
    Resources,
    chain,
    decision_hash,
    dumps,
    loads_cluster_event,
    loads_decision,
    stable_id,
)


def _bind(uid: str) -> BindRequested:
    return BindRequested(
        decision_id=stable_id("default", "3", uid, "BindRequested"),
        ts=1.0,
        input_offset=3,
        config_hash="c",
        code_version="0",
        action="allocate",
        namespace="ns",
        name=uid,
        uid=uid,
        job="ns/j",
        queue="q",
        node="n1",
        gpu_indices=(0, 1),
    )


def test_observed_event_round_trips_byte_identically() -> None:
    event = NodeObserved(event_id="e1", ts=2.5, node=NodeSpec(name="n1", allocatable=Resources(gpu_milli=8000)))
    raw = dumps(event)
    assert loads_cluster_event(raw) == event
    assert dumps(loads_cluster_event(raw)) == raw


def test_decision_round_trips_and_ids_are_stable() -> None:
    decision = _bind("p1")
    assert loads_decision(dumps(decision)) == decision
    assert decision.decision_id == _bind("p1").decision_id
    assert decision.decision_id != _bind("p2").decision_id


@given(st.lists(st.text(), min_size=1, max_size=5))
def test_stable_id_is_the_uuid5_of_the_joined_parts(parts: list[str]) -> None:
    """Ids recorded by earlier versions (``str(uuid.uuid5(...))``) must still be what the same parts give."""
    assert stable_id(*parts) == str(uuid.uuid5(ID_NAMESPACE, "\x1f".join(parts)))


def test_malformed_bytes_raise_with_reason() -> None:
    with pytest.raises(MalformedEvent, match="type"):
        loads_cluster_event(b'{"type": "NoSuchEvent", "event_id": "x", "ts": 0}')
    with pytest.raises(MalformedEvent):
        loads_cluster_event(b"not json")


def test_hash_chain_links_each_decision_to_its_predecessor() -> None:
    linked, head = chain([_bind("p1"), _bind("p2")], prev_hash="genesis")
    assert linked[0].prev_hash == "genesis"
    assert linked[1].prev_hash == decision_hash(linked[0])
    assert head == decision_hash(linked[1])
