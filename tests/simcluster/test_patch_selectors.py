"""Pure rules under the HTTP layer: RFC 7386 merge patch, RFC 6902 JSON patch, strategic merge by key,
label/field selector grammar."""

from __future__ import annotations

from typing import Any

import pytest

from kai_stream.connectors.simcluster.errors import ApiError
from kai_stream.connectors.simcluster.patch import apply, json_patch, merge_patch, strategic_merge_patch
from kai_stream.connectors.simcluster.resources import by_key
from kai_stream.connectors.simcluster.rules import INTERNAL
from kai_stream.connectors.simcluster.selectors import parse, view
from kai_stream.connectors.simcluster.store import Store

POD_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")


def test_merge_patch_rfc7386_examples() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}}
    assert merge_patch(target, {"a": "z", "c": {"f": None}}) == {"a": "z", "c": {"d": "e"}}
    assert merge_patch({"a": ["b"]}, {"a": ["c", "d"]}) == {"a": ["c", "d"]}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}}, "inputs are not mutated"


def test_json_patch_operations() -> None:
    doc = {"spec": {"list": [1, 2]}, "m": {"k": "v"}}
    out = json_patch(doc, [
        {"op": "add", "path": "/spec/list/-", "value": 3},
        {"op": "add", "path": "/spec/list/0", "value": 0},
        {"op": "remove", "path": "/m/k"},
        {"op": "copy", "from": "/spec/list", "path": "/copy"},
        {"op": "move", "from": "/copy", "path": "/moved"},
        {"op": "test", "path": "/moved/3", "value": 3},
    ])
    assert out == {"spec": {"list": [0, 1, 2, 3]}, "m": {}, "moved": [0, 1, 2, 3]}
    with pytest.raises(ApiError) as missing:
        json_patch(doc, [{"op": "replace", "path": "/nope", "value": 1}])
    assert missing.value.code == 422
    with pytest.raises(ApiError) as not_a_list:
        json_patch(doc, {"spec": {}})
    assert not_a_list.value.code == 400


def test_strategic_merge_by_merge_key_and_delete_directive() -> None:
    pod: dict[str, Any] = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}
    patch = {"spec": {"containers": [{"name": "b", "image": "2"}, {"name": "a", "$patch": "delete"},
                                     {"name": "c", "image": "3"}]}}
    assert strategic_merge_patch(pod, patch) == {
        "spec": {"containers": [{"name": "b", "image": "2"}, {"name": "c", "image": "3"}]}}


def test_apply_refuses_unknown_media_and_strategic_on_custom_resources() -> None:
    with pytest.raises(ApiError) as unknown:
        apply("application/xml", {}, {}, builtin=True)
    assert unknown.value.code == 415
    with pytest.raises(ApiError) as strategic:
        apply("application/strategic-merge-patch+json", {}, {}, builtin=False)
    assert strategic.value.code == 415
    assert apply("application/merge-patch+json; charset=utf-8", {"a": 1}, {"b": 2}, builtin=False) == {"a": 1, "b": 2}


@pytest.mark.parametrize(
    ("labels", "selector", "expected"),
    [
        ({"a": "1"}, "a=1", True),
        ({"a": "1"}, "a==1,b", False),
        ({}, "a!=1", True),
        ({"a": "2"}, "a in (1, 2)", True),
        ({"a": "3"}, "a in (1,2),!b", False),
        ({}, "a notin (1)", True),
        ({"b": "x"}, "!b", False),
    ],
)
def test_label_selector(labels: dict[str, str], selector: str, expected: bool) -> None:
    flat = view({"metadata": {"labels": labels}}, POD_FIELDS)
    assert parse(selector, None, POD_FIELDS).matches(flat) is expected


def test_field_selector_and_errors() -> None:
    obj = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}, "status": {"phase": "Running"}}
    flat = view(obj, POD_FIELDS)
    assert parse(None, "spec.nodeName=,status.phase=Running", POD_FIELDS).matches(flat)
    assert not parse(None, "metadata.name!=p", POD_FIELDS).matches(flat)
    for bad_field, bad_label in (("spec.priority=1", None), (None, "a b=c")):
        with pytest.raises(ApiError) as err:
            parse(bad_label, bad_field, POD_FIELDS)
        assert err.value.code == 400


def test_views_are_invisible_to_the_garbage_collector() -> None:
    import gc

    flat = view({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"nodeName": "n"}}, POD_FIELDS)
    assert flat["label:a"] == "1" and flat["field:spec.nodeName"] == "n"
    assert not gc.is_tracked(flat)


def test_a_node_selector_lists_from_the_pods_by_node_index_what_a_full_scan_finds() -> None:
    """Pods listed by ``spec.nodeName=<node>`` come from the store's index by node (as kube-apiserver's watch cache
    keeps one), which follows binds, deletions and re-creations; the answer equals a scan of every pod."""
    pods = by_key("pods")
    store = Store()
    for i in range(12):
        store.create(pods, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "ns"},
                            "spec": {"containers": [{"name": "c", "image": "x"}]}})

    def bind(name: str, node: str) -> None:
        def change(pod: dict[str, Any]) -> dict[str, Any]:
            pod["spec"]["nodeName"] = node
            return pod
        store.mutate(pods, "ns", name, change, subresource=INTERNAL)

    for i in range(9):
        bind(f"p{i}", f"n{i % 3}")
    store.delete(pods, "ns", "p0")
    store.delete(pods, "ns", "p4")
    store.create(pods, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p0", "namespace": "ns"},
                        "spec": {"containers": [{"name": "c", "image": "x"}]}})
    bind("p0", "n2")

    def listed(selector: str, namespace: str | None = None) -> list[str]:
        return [p["metadata"]["name"] for p in store.list_objects(pods, namespace, parse(None, selector,
                                                                                         pods.field_labels))[0]]

    every = store.objects(pods)
    for node in ("n0", "n1", "n2", "n3", ""):
        scanned = [p["metadata"]["name"] for p in every if (p["spec"].get("nodeName") or "") == node]
        assert listed(f"spec.nodeName={node}") == scanned
        assert listed(f"spec.nodeName=={node},metadata.namespace=ns", "ns") == scanned
    assert listed("spec.nodeName=n0") == ["p3", "p6"]
    assert listed("spec.nodeName=n2") == ["p0", "p2", "p5", "p8"]
    assert listed("spec.nodeName=") == ["p10", "p11", "p9"]
    assert listed("spec.nodeName=n1,status.phase=Running") == []
    assert listed("spec.nodeName!=n2") == sorted(["p1", "p3", "p6", "p7", "p9", "p10", "p11"])
