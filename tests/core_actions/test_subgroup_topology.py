"""A subgroup's ``topologyConstraint`` (PodGroup v2alpha2 ``spec.subGroups[].topologyConstraint``): the subgroup's
pods stay inside one domain of its level, itself inside the pod group's domain; a required level no domain can
hold leaves the job pending with a reason that names the subgroup.

The cluster: zones z1 (racks r1: n1, n2 and r2: n3, n4) and z2 (rack r3: n5, n6), 2 GPUs per node, every pod
1 GPU."""

from __future__ import annotations

import pytest

from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import BindRequested, PodGroupObserved, PodPending, TopologyConstraint
from kai_stream.core.manifests import ManifestError, load_scenario
from kai_stream.core.scheduler.plugins.topology import TopologyPlugin
from kai_stream.simulate import SimulationResult, simulate

NODES = {"n1": ("z1", "r1"), "n2": ("z1", "r1"), "n3": ("z1", "r2"), "n4": ("z1", "r2"), "n5": ("z2", "r3")}
NODES["n6"] = ("z2", "r3")
CLUSTER = """
apiVersion: kai.scheduler/v1alpha1
kind: Topology
metadata: {name: dc}
spec:
  levels: [{nodeLabel: zone}, {nodeLabel: rack}, {nodeLabel: kubernetes.io/hostname}]
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: qa}
spec: {resources: {gpu: {quota: -1, limit: -1}, cpu: {quota: -1}, memory: {quota: -1}}}
"""


def _node(name: str, zone: str, rack: str) -> str:
    return f"""---
apiVersion: v1
kind: Node
metadata: {{name: {name}, labels: {{zone: {zone}, rack: {rack}, kubernetes.io/hostname: {name}}}}}
status: {{allocatable: {{nvidia.com/gpu: "2", cpu: "16", memory: 64Gi}}}}
"""


def _group(min_member: int, sub_groups: str, constraint: str = "") -> str:
    return f"""---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {{name: pg, namespace: ml, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  minMember: {min_member}
  queue: qa
  {constraint}
  subGroups: {sub_groups}
"""


def _pod(name: str, sub_group: str, second: int, node: str | None = None) -> str:
    group = f"annotations: {{pod-group-name: pg}}\n  labels: {{kai.scheduler/subgroup-name: {sub_group}}}"
    if not sub_group:
        group = "labels: {kai.scheduler/queue: qa}"
    return f"""---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  creationTimestamp: "2026-01-01T00:00:{second:02d}Z"
  {group}
spec:
  schedulerName: kai-scheduler
  {f"nodeName: {node}" if node else ""}
  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]
"""


def _run(group: str, pods: list[tuple[str, str]], busy: tuple[str, ...] = ()) -> SimulationResult:
    text = CLUSTER + "".join(_node(n, z, r) for n, (z, r) in NODES.items()) + group
    text += "".join(_pod(f"busy-{i}", "", i, node) for i, node in enumerate(busy))
    text += "".join(_pod(name, sub, 10 + i) for i, (name, sub) in enumerate(pods))
    result = simulate(load_scenario(text), SchedulerConfig(), cycles=10)
    assert result.settled
    return result


def _placed(result: SimulationResult) -> dict[str, str]:
    return {d.name: d.node for d in result.decisions if isinstance(d, BindRequested)}


def test_each_subgroup_gets_a_rack_of_its_own_inside_the_groups_zone() -> None:
    """Two subgroups of 2 pods, each required in one rack, the pod group required in one zone; one GPU taken on n1,
    n3 and n5. z2 (3 GPU free, the tightest zone) has room for the gang but not for both subgroups in its one rack;
    in z1 the racks hold 3 each: a takes one, b the other."""
    subs = (
        "[{name: a, minMember: 2, topologyConstraint: {topology: dc, requiredTopologyLevel: rack}},"
        " {name: b, minMember: 2, topologyConstraint: {topology: dc, requiredTopologyLevel: rack}}]"
    )
    group = _group(4, subs, "topologyConstraint: {topology: dc, requiredTopologyLevel: zone}")
    placed = _placed(_run(group, [("a0", "a"), ("a1", "a"), ("b0", "b"), ("b1", "b")], busy=("n1", "n3", "n5")))
    assert set(placed) == {"a0", "a1", "b0", "b1"}
    rack = {name: NODES[node][1] for name, node in placed.items()}
    assert all(NODES[node][0] == "z1" for node in placed.values())
    assert rack["a0"] == rack["a1"] and rack["b0"] == rack["b1"] and rack["a0"] != rack["b0"]


def test_a_subgroup_bound_to_one_host_stays_there_while_the_other_spreads() -> None:
    """Subgroup a (2 pods) must share a host; b has no constraint. With one GPU taken on n1, a may not take n1."""
    subs = "[{name: a, minMember: 2, topologyConstraint: {requiredTopologyLevel: kubernetes.io/hostname}}, {name: b}]"
    placed = _placed(_run(_group(3, subs), [("a0", "a"), ("a1", "a"), ("b0", "b")], busy=("n1",)))
    assert placed["a0"] == placed["a1"] != "n1"
    assert "b0" in placed


def test_a_subgroup_no_domain_can_hold_is_pending_and_the_reason_names_it() -> None:
    """Subgroup workers needs 3 pods on one host; every node has 2 GPUs."""
    host = "{topology: dc, requiredTopologyLevel: kubernetes.io/hostname}"
    subs = f"[{{name: workers, minMember: 3, topologyConstraint: {host}}}]"
    result = _run(_group(3, subs), [("w0", "workers"), ("w1", "workers"), ("w2", "workers")])
    assert _placed(result) == {}
    reason = [d for d in result.decisions if isinstance(d, PodPending) and d.name == "w0"][-1]
    assert reason.code == "NoNodeFits"
    assert reason.reason == (
        "topology dc, requirement kubernetes.io/hostname couldn't be satisfied for job <ml/pg>, subgroup workers:"
        " it needs 3 of its 3 pending pods (3 GPU) in one kubernetes.io/hostname domain; none of the 6 domains can"
        " hold them"
    )


def test_the_manifest_carries_each_subgroups_constraint_and_parent() -> None:
    subs = (
        "[{name: replica, topologyConstraint: {topology: dc, preferredTopologyLevel: zone}},"
        " {name: w, parent: replica, minMember: 2, topologyConstraint: {topology: dc, requiredTopologyLevel: rack}},"
        " {name: x}]"
    )
    (event,) = [e for e in load_scenario(CLUSTER + _group(2, subs)) if isinstance(e, PodGroupObserved)]
    got = {s.name: (s.parent, s.min_member, s.topology_constraint) for s in event.pod_group.sub_groups}
    assert got == {
        "replica": (None, 1, TopologyConstraint(topology="dc", preferred_level="zone")),
        "w": ("replica", 2, TopologyConstraint(topology="dc", required_level="rack")),
        "x": (None, 1, None),
    }


def test_a_subgroup_constraint_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(ManifestError, match=r"spec.subGroups\[0\].topologyConstraint"):
        load_scenario(CLUSTER + _group(1, "[{name: a, topologyConstraint: rack}]"))


def test_an_elastic_subgroups_next_pod_joins_the_rack_of_its_running_one() -> None:
    """Subgroup a (minMember 1, required rack) runs a0 on n1 (rack r1, 3 GPUs free there); a1 comes next. Rack r2
    (1 GPU free: n3 and n4 mostly taken) is the fuller rack, which KAI's order tries first, but a1 must join a0 in
    r1."""
    subs = "[{name: a, minMember: 1, topologyConstraint: {topology: dc, requiredTopologyLevel: rack}}]"
    running = _pod("a0", "a", 5, "n1")
    placed = _placed(_run(_group(1, subs) + running, [("a1", "a")], busy=("n3", "n4", "n4", "n1")))
    assert NODES[placed["a1"]][1] == "r1"


DC = ("datacenter", "zone", "rack")


@pytest.mark.parametrize(
    ("levels", "required", "preferred", "expected"),
    [
        (DC, "zone", "rack", ["rack", "zone"]),
        (DC, "zone", None, ["zone"]),
        (DC, None, "rack", ["rack", "zone", "datacenter", None]),
        (DC, "rack", None, ["rack"]),
        (DC, None, "zone", ["zone", "datacenter", None]),
        (("zone",), None, "zone", ["zone", None]),
        (("datacenter", "region", "zone", "rack"), "region", "zone", ["zone", "region"]),
    ],
)
def test_relevant_levels_are_kais(
    levels: tuple[str, ...], required: str | None, preferred: str | None, expected: list[str | None]
) -> None:
    """KAI's ``TestTopologyPlugin_calculateRelevantDomainLevels`` (plugins/topology/job_filtering_test.go), the
    cases with a result; KAI's "root" is None (the whole cluster)."""
    plugin = TopologyPlugin()
    plugin.topologies = {"test-topology": levels}
    constraint = TopologyConstraint(topology="test-topology", required_level=required, preferred_level=preferred)
    assert plugin.relevant_levels(constraint) == expected
