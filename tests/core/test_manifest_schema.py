"""Scenario manifests are validated against their kind's schema: a typo in a field name is an error naming the
field path (not a silently different scenario), ``lenient`` accepts unknown fields, an empty file is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_stream.core.events import PodObserved, QueueObserved
from kai_stream.core.manifests import ManifestError, load_scenario, validate_manifests

ROOT = Path(__file__).resolve().parents[2]
DEMO = (ROOT / "examples" / "demo.yaml").read_text()


def _typo(old: str, new: str) -> str:
    assert old in DEMO
    return DEMO.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("overQuotaWeight: 2", "overQuotaWieght: 2", "Queue team-a: spec.resources.gpu.overQuotaWieght"),
        ("schedulerName: kai-scheduler", "schedulerNmae: kai-scheduler", "Pod demo/team-a-job-00: spec.schedulerNmae"),
        ("limits:", "limtis:", "Pod demo/team-a-job-00: spec.containers[0].resources.limtis"),
        ("allocatable:", "allocateable:", "Node dgx-a: status.allocateable"),
        ("  labels:\n    kai.scheduler/queue", "  lables:\n    kai.scheduler/queue", "metadata.lables"),
    ],
)
def test_unknown_field_is_an_error_naming_its_path(old: str, new: str, where: str) -> None:
    text = _typo(old, new)
    with pytest.raises(ManifestError, match="unknown field") as info:
        load_scenario(text)
    assert where in str(info.value)
    with pytest.raises(ManifestError, match="unknown field"):
        validate_manifests(text)


def test_lenient_accepts_unknown_fields_like_the_api_server() -> None:
    events = load_scenario(_typo("overQuotaWeight: 2", "overQuotaWieght: 2"), lenient=True)
    queue = next(e for e in events if isinstance(e, QueueObserved) and e.queue.name == "team-a")
    assert queue.queue.resources.gpu.over_quota_weight == 1  # the misspelt field was dropped, the default applies
    assert validate_manifests(_typo("schedulerName:", "schedulerNmae:"), lenient=True) > 0


def test_wrong_types_and_enums_are_errors_even_when_lenient() -> None:
    group = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: g, namespace: demo}
spec: {minMember: "four", queue: team-a, preemptibility: sometimes}
"""
    with pytest.raises(ManifestError, match=r"PodGroup demo/g: spec.minMember: expected integer.*and 1 more"):
        load_scenario(DEMO + "---" + group, lenient=True)


def test_crd_specs_keep_fields_kai_adds() -> None:
    """Queue and PodGroup specs preserve unknown fields (KAI's own CRDs carry more), as the shipped CRDs do."""
    events = load_scenario(_typo("  resources:\n    gpu: {quota: 4, overQuotaWeight: 2", "  kaiOnly: x\n  resources:\n"
                                 "    gpu: {quota: 4, overQuotaWeight: 2"))
    assert any(isinstance(e, QueueObserved) for e in events)


def test_every_example_validates() -> None:
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        assert any(isinstance(e, PodObserved) for e in load_scenario(path.read_text())), path


@pytest.mark.parametrize("text", ["", "---\n", "# nothing\n---\n---\n"])
def test_empty_scenario_is_an_error(text: str) -> None:
    with pytest.raises(ManifestError, match="no Kubernetes objects"):
        load_scenario(text)
