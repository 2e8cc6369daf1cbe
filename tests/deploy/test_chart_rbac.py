"""Least privilege: render the chart and prove no component can do more than it needs on the Kubernetes API."""

from __future__ import annotations

from typing import Any

import pytest

from .chart import EXAMPLE_VALUES, by_kind, render

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)

CONNECTOR: set[Grant] = {
    (group, resource, verb)
    for group, resource in [
        ("", "pods"),
        ("", "nodes"),
        ("scheduling.run.ai", "queues"),
        ("scheduling.run.ai", "podgroups"),
        ("kai.scheduler", "topologies"),
        ("scheduling.k8s.io", "priorityclasses"),
        ("resource.k8s.io", "deviceclasses"),
        ("resource.k8s.io", "resourceclaims"),
        ("resource.k8s.io", "resourceclaimtemplates"),
        ("resource.k8s.io", "resourceslices"),
    ]
    for verb in ("get", "list", "watch")
}
BINDER: set[Grant] = {
    ("", "pods/binding", "create"),
    ("", "pods/eviction", "create"),
    ("", "pods", "patch"),
    ("", "pods", "get"),
    ("", "pods", "list"),  # the pods on a node, before a bind (room check, watched)
    ("", "pods", "watch"),
    ("", "nodes", "get"),  # the node's allocatable, before a bind (room check, watched)
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    ("resource.k8s.io", "resourceslices", "list"),  # the node's DRA GPU devices (room check)
    ("resource.k8s.io", "resourceclaims", "get"),  # DRA allocation before a bind (binder/dra.py)
    ("resource.k8s.io", "resourceclaims/status", "update"),  # status.allocation and reservedFor
    ("resource.k8s.io", "resourceclaimtemplates", "get"),  # a template's claim, made when no controller did
    ("resource.k8s.io", "resourceclaims", "create"),
    ("", "pods/status", "patch"),  # PodScheduled=False, DisruptionTarget
    ("", "events", "create"),  # an Event on each evicted pod and its PodGroup
    ("scheduling.run.ai", "podgroups", "get"),  # read-modify-write of status.schedulingConditions
    ("scheduling.run.ai", "podgroups/status", "patch"),
}
ALLOWED: dict[str, set[Grant]] = {
    "connector": CONNECTOR,
    "binder": BINDER,
    "processor": set(),
    "history-sink": set(),
    "gpu-agent": set(),
}

RENDERINGS = {
    "default": (),
    "example": ("-f", str(EXAMPLE_VALUES)),
}


def _grants(docs: list[dict[str, Any]]) -> dict[str, set[Grant]]:
    """Every (group, resource, verb) each ServiceAccount of the release gets through any (Cluster)RoleBinding."""
    roles = {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs if doc["kind"] in ("Role", "ClusterRole")}
    grants: dict[str, set[Grant]] = {}
    for binding in docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount", f"{binding['metadata']['name']} binds a {subject['kind']}"
            for rule in role.get("rules", []):
                assert "nonResourceURLs" not in rule and "resourceNames" not in rule, rule
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            grants.setdefault(subject["name"], set()).add((group, resource, verb))
    return grants


@pytest.mark.parametrize("rendering", sorted(RENDERINGS))
def test_no_component_can_do_more_than_listed(rendering: str) -> None:
    docs = render(*RENDERINGS[rendering])
    accounts = by_kind(docs, "ServiceAccount")
    assert sorted(accounts) == sorted(f"kai-stream-{component}" for component in ALLOWED)
    grants = _grants(docs)
    assert set(grants) <= set(accounts), f"bindings to accounts outside the release: {set(grants) - set(accounts)}"
    for component, allowed in ALLOWED.items():
        granted = grants.get(f"kai-stream-{component}", set())
        assert all("*" not in grant for grant in granted), (component, granted)
        assert granted == allowed, f"{component}: extra {granted - allowed}, missing {allowed - granted}"


@pytest.mark.parametrize("rendering", sorted(RENDERINGS))
def test_pods_run_as_their_own_account_and_only_api_clients_mount_a_token(rendering: str) -> None:
    docs = render(*RENDERINGS[rendering])
    accounts = by_kind(docs, "ServiceAccount")
    workloads = [doc for doc in docs if doc["kind"] in ("Deployment", "DaemonSet", "StatefulSet")]
    assert workloads
    for workload in workloads:
        component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        pod = workload["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == f"kai-stream-{component}"
        mounts_token = component in ("connector", "binder")
        assert pod["automountServiceAccountToken"] is mounts_token, component
        assert accounts[pod["serviceAccountName"]]["automountServiceAccountToken"] is mounts_token
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_the_rbac_check_catches_an_extra_permission() -> None:
    """The grant collector is not vacuous: a wildcard rule added to the binder's role shows up."""
    docs = render()
    for doc in docs:
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "kai-stream-binder":
            doc["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})
    assert ("", "secrets", "get") in _grants(docs)["kai-stream-binder"]
