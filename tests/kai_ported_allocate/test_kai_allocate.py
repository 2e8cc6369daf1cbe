"""KAI's allocate tests, ported: ``pkg/scheduler/actions/allocate/*_test.go`` (allocate alone, one session) and
``actions/integration_tests/allocate/*_test.go`` (all actions, rounds). Each case is KAI's literal, named by
its source file and KAI test name; expectations are KAI's ``JobExpectedResults`` / ``TaskExpectedResults``.

Cases not ported are in ``NOT_PORTED`` with the reason; a case that fails on a known deviation of ours is a
strict xfail naming it.
"""

from __future__ import annotations

from typing import Any

import pytest

from . import kai_topology as kai

UNIT = [
    "allocate__allocate",
    "allocate__allocateGang",
    "allocate__allocateElastic",
    "allocate__allocate_subgroups",
    "allocate__allocateFractionalGpu",
]
INTEGRATION = ["integration_tests__allocate__allocate", "integration_tests__allocate__allocateFractionalGpu"]

NOT_PORTED: dict[tuple[str, str], str] = {
    ("allocate__allocate", "Fraction job on MIG node"): "MIG nodes are not modelled",
    ("allocate__allocate", "Do not allocate regular GPU task on dynamic MIG node"): "MIG nodes are not modelled",
    ("allocate__allocate", "1 build job running on 2 GPU, assign pending jobs of best effort"): (
        "best-effort pods (no resource request) are not modelled"
    ),
    (
        "allocate__allocateFractionalGpu",
        "test gpuSharingOrder for a node that has a gpu reservation pod pending - two pods",
    ): "a task already Pipelined in the snapshot (GPU reservation pod) has no counterpart in our state",
    ("integration_tests__allocate__allocateFractionalGpu", "Basic request gpu by memory when cluster is empty"): (
        "gpu-memory requests: KAI's fake node has no GPU memory label, the fraction is derived differently"
    ),
}
NOT_PORTED.update(
    {
        ("allocate__allocateFractionalGpu", name): (
            "different node-level (nodeplacement) and GPU-level (gpupack/gpuspread) strategies: we have one knob"
        )
        for name in ("Pack nodes, spread GPUs", "Spread nodes, pack GPUs")
    }
)

XFAIL: dict[tuple[str, str], str] = {}


def _cases(sources: list[str]) -> list[Any]:
    out = []
    for source in sources:
        for index, topology in enumerate(kai.load(source)):
            key = (source, topology["Name"])
            if key in NOT_PORTED:
                continue
            marks = [pytest.mark.xfail(strict=True, reason=XFAIL[key])] if key in XFAIL else []
            out.append(pytest.param(source, index, marks=marks, id=f"{source}[{index}]"))
    return out


@pytest.mark.parametrize(("source", "index"), _cases(UNIT))
def test_allocate_unit(source: str, index: int) -> None:
    topology = kai.load(source)[index]
    assert kai.mismatches(topology, kai.run_unit(topology)) == []


@pytest.mark.parametrize(("source", "index"), _cases(INTEGRATION))
def test_allocate_integration(source: str, index: int) -> None:
    topology = kai.load(source)[index]
    rounds = kai.run_integration(topology, topology.get("RoundsUntilMatch") or 2, topology.get("RoundsAfterMatch") or 5)
    assert [p for statuses in rounds for p in kai.mismatches(topology, statuses)] == []


def test_every_case_is_ported_or_listed() -> None:
    names = {(s, c["Name"]) for s in UNIT + INTEGRATION for c in kai.load(s)}
    assert set(NOT_PORTED) <= names and set(XFAIL) <= names
    for source, name in NOT_PORTED:
        topology = kai.case(source, name)
        with pytest.raises(ValueError):
            kai.config_of(topology, ("allocate",))
            kai.events(topology)
