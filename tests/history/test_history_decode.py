"""The reader's decode shortcuts (ticks, repeated GPU readings) give exactly what full validation gives."""

from __future__ import annotations

from kai_stream.core.events import CLUSTER_EVENT, GpuDevice, GpuHealthObserved, NodeObserved, NodeSpec, Tick, dumps
from kai_stream.history.reader import decode_cluster_events


def test_shortcuts_equal_full_validation_and_reject_bad_records() -> None:
    gpus = tuple(GpuDevice(index=i, uuid=f"GPU-{i}", memory_mib=81920) for i in range(2))
    sick = (GpuDevice(index=0, uuid="GPU-0", healthy=False, reason='xid 79 ,"ts":1.0 "quoted"'),)
    events = [
        Tick(event_id="t1", ts=1.0),
        GpuHealthObserved(event_id="h1", ts=2.0, node="n1", gpus=gpus),
        GpuHealthObserved(event_id="h2", ts=3.5, node="n1", gpus=gpus),  # same reading: a cache hit
        GpuHealthObserved(event_id="h3", ts=4.0, node="n2", gpus=gpus),
        GpuHealthObserved(event_id="h4", ts=5.0, node="n1", gpus=sick),
        NodeObserved(event_id="n", ts=6.0, node=NodeSpec(name="n1")),
        Tick(event_id="t2", ts=7e3),
    ]
    raws: list[str | bytes] = [dumps(e) for e in events]
    decoded, bad = decode_cluster_events(raws)
    assert bad == 0
    assert [dumps(e) for e in decoded if e is not None] == raws
    assert decoded == [CLUSTER_EVENT.validate_json(r) for r in raws]

    broken: list[str | bytes] = [
        b'{"event_id":"t","pool":"default","ts":"soon","type":"Tick","v":1}',
        b'{"type":"Tick", nope',
        dumps(events[1]).replace(b'"ts":2.0', b'"ts":"2.0x"'),
        dumps(events[1]).replace(b'"node":"n1"', b'"node":7'),
        dumps(events[1]).decode(),
    ]
    decoded, bad = decode_cluster_events(broken)
    assert bad == 4 and decoded[:4] == [None] * 4 and decoded[4] == events[1]
