"""A batch that outgrows every parked snapshot of a pool is folded with the pool's indexes dropped
(``PartitionEngine.expect`` → ``Derived.release_if_outgrown``): its next cycle makes them again in one pass and
decides exactly what it decides when they were kept event by event; a batch the snapshot can take keeps them."""

from __future__ import annotations

from pathlib import Path

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import ClusterEvent, NodeObserved, PodObserved
from kai_stream.core.manifests import load_scenario
from kai_stream.streams.engine import PartitionEngine
from tests.streams.records import tick

ROOT = Path(__file__).resolve().parents[2]
POOL = "default"


def _engine() -> tuple[PartitionEngine, int]:
    """An engine that folded the fair-share example and ran a cycle on it (its snapshot parked); the next offset."""
    engine = PartitionEngine.for_config(0, SchedulerConfig(), "test")
    events: list[ClusterEvent] = [*load_scenario((ROOT / "examples" / "fair-share.yaml").read_text()), tick(5.0)]
    for offset, event in enumerate(events):
        engine.fold(offset, event)
    engine.cycle([POOL])
    return engine, len(events)


def _burst(engine: PartitionEngine, pods: int) -> list[ClusterEvent]:
    """A new node, then ``pods`` new pending pods, copies of the example's first pending one."""
    state = engine.pools[POOL].state
    node = state.nodes[min(state.nodes)]
    spec = node.model_copy(update={"name": "extra", "uid": "extra"})
    extra: list[ClusterEvent] = [NodeObserved(event_id="burst-node", ts=6.0, node=spec, resource_version=1)]
    template = min(
        (pod for pod in engine.pools[POOL].state.pods.values() if pod.node_name is None), key=lambda pod: pod.uid
    )
    return extra + [
        PodObserved(
            event_id=f"burst-{i}",
            ts=6.0,
            pod=template.model_copy(update={"name": f"burst-{i}", "uid": f"burst-{i}", "pod_group": None}),
            resource_version=1,
        )
        for i in range(pods)
    ]


def _decide(engine: PartitionEngine, first: int, burst: list[ClusterEvent], *, expect: bool) -> list[bytes]:
    if expect:
        engine.expect(len(burst))
    for offset, event in enumerate(burst, start=first):
        engine.fold(offset, event)
    return [item.value() for item in engine.cycle([POOL])]


def test_a_burst_that_outgrows_the_parked_snapshot_drops_the_indexes_and_decides_the_same() -> None:
    kept, first = _engine()
    released, _ = _engine()
    burst = _burst(kept, 200)
    derived = released.pools[POOL].state.derived
    assert derived.parked and derived.indexed is not None

    same = _decide(kept, first, burst, expect=False)
    assert kept.pools[POOL].state.derived.indexed is not None
    released.expect(len(burst))
    assert derived.indexed is None and not derived.parked
    decided = _decide(released, first, burst, expect=False)

    assert decided == same
    assert any(b'"BindRequested"' in value for value in decided)
    assert derived.indexed is not None and len(derived.indexed) == len(released.pools[POOL].state.pods)
    assert derived.parked  # the cycle parked its snapshot again


def test_a_batch_the_parked_snapshot_can_take_keeps_the_indexes() -> None:
    engine, first = _engine()
    derived = engine.pools[POOL].state.derived
    snapshot = derived.parked[POOL]
    fits = (len(snapshot.base.jobs) + 64) // 2 - len(snapshot.dirty or ())  # type: ignore[attr-defined]
    assert not derived.release_if_outgrown(1)
    assert not derived.release_if_outgrown(fits)
    assert derived.parked and derived.indexed is not None
    assert derived.release_if_outgrown(fits + 1)
    assert not derived.parked and derived.indexed is None
    assert _decide(engine, first, _burst(engine, 1), expect=False)


def test_without_a_parked_snapshot_nothing_is_released() -> None:
    engine = PartitionEngine.for_config(0, SchedulerConfig(), "test")
    for offset, event in enumerate(load_scenario((ROOT / "examples" / "fair-share.yaml").read_text())):
        engine.fold(offset, event)
    derived = engine.pools[POOL].state.derived
    indexed = derived.indexed
    assert not derived.parked
    assert not derived.release_if_outgrown(10_000)
    assert derived.indexed is indexed
