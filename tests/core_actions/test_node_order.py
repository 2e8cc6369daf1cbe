"""Node order is the node-order plugin's: bin-pack fills the fullest node, spread the emptiest, per resource type;
without the plugin the node index takes the first fit in its own order (that of bin-pack)."""

from __future__ import annotations

import pytest

from kai_stream.core.config import DEFAULT_PLUGINS, SchedulerConfig
from kai_stream.core.events import AnyEvent, BindRequested, PodObserved, PodSpec, Resources
from kai_stream.core.scheduler.cycle import run_cycle
from tests.core_actions.builders import GIB, fold, node_events, pending, queue, running


def _cluster(*arriving: AnyEvent) -> list[AnyEvent]:
    """n00: 3 of 4 GPUs used (one half-used), n01: idle, n02: 2 used."""
    events: list[AnyEvent] = [*node_events(3, 4), queue("q")]
    used = [("n00", 0), ("n00", 1), ("n02", 0), ("n02", 1)]
    events += [running(uid, "q", node, gpu, "train") for uid, (node, gpu) in enumerate(used, start=1)]
    half = PodSpec(
        namespace="t",
        name="half",
        uid="u-half",
        queue="q",
        requests=Resources(gpu_milli=500, cpu_milli=1000, memory=GIB),
        gpu_fraction_milli=500,
        node_name="n00",
        gpu_indices=(2,),
        phase="Running",
        created=9.0,
        started=9.0,
    )
    return [*events, PodObserved(event_id="p-half", ts=0.0, pod=half), *arriving]


def _binds(config: SchedulerConfig, pod: AnyEvent) -> list[tuple[str, tuple[int, ...]]]:
    state = fold(_cluster(pod))
    made = run_cycle(state, config, pool="default", input_offset=state.offset, reuse=False)
    return [(d.node, d.gpu_indices) for d in made if isinstance(d, BindRequested)]


def _fraction(milli: int) -> PodObserved:
    pod = PodSpec(
        namespace="t",
        name="frac",
        uid="u-frac",
        queue="q",
        requests=Resources(gpu_milli=milli, cpu_milli=1000, memory=GIB),
        gpu_fraction_milli=milli,
        created=2000.0,
    )
    return PodObserved(event_id="p-frac", ts=0.0, pod=pod)


WITHOUT_NODE_ORDER = tuple(name for name in DEFAULT_PLUGINS if name != "nodeorder")


@pytest.mark.parametrize(
    ("placement", "plugins", "whole", "fraction"),
    [
        ({"gpu": "binpack"}, DEFAULT_PLUGINS, [("n00", (3,))], [("n00", (2,))]),
        ({"gpu": "spread"}, DEFAULT_PLUGINS, [("n01", (0,))], [("n01", (0,))]),
        ({"gpu": "spread"}, WITHOUT_NODE_ORDER, [("n00", (3,))], [("n00", (2,))]),
    ],
)
def test_the_node_order_plugin_decides_where_a_task_goes(
    placement: dict[str, str],
    plugins: tuple[str, ...],
    whole: list[tuple[str, tuple[int, ...]]],
    fraction: list[tuple[str, tuple[int, ...]]],
) -> None:
    config = SchedulerConfig.model_validate({"actions": ["allocate"], "plugins": plugins, "placement": placement})
    assert _binds(config, pending(1, 100, "q", 1, "train")) == whole
    assert _binds(config, _fraction(500)) == fraction
