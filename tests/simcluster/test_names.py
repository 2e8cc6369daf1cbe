"""The simulated API server refuses object names the real one refuses (RFC 1123 subdomain / label, lengths)
with 422 Invalid, over HTTP."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from connectors.simcluster.names import name_problems

from .manifests import node, pod


@pytest.mark.parametrize("name", ["x" * 10_000, "../../etc", "Upper", "-lead", "trail-", "a_b", "a/b", "", "a..b"])
async def test_bad_pod_and_node_names_get_422(v1: client.CoreV1Api, name: str) -> None:
    for create in (lambda: v1.create_namespaced_pod("default", pod(name)), lambda: v1.create_node(node(name))):
        with pytest.raises(ApiException) as caught:
            await create()
        assert caught.value.status == 422
        status = json.loads(caught.value.body)
        assert status["reason"] == "Invalid" and "metadata.name" in status["message"]
        assert len(caught.value.body) < 2000
    assert (await v1.list_namespaced_pod("default")).items == [] and (await v1.list_node()).items == []


async def test_valid_names_are_accepted(v1: client.CoreV1Api) -> None:
    created = await v1.create_namespaced_pod("team-a", pod("a.b-1", "team-a"))
    assert created.metadata.name == "a.b-1"
    await v1.create_node(node("n" * 253))
    with pytest.raises(ApiException) as caught:
        await v1.create_namespaced_pod("Bad_NS", pod("ok", "Bad_NS"))
    assert caught.value.status == 422 and "metadata.namespace" in json.loads(caught.value.body)["message"]


def test_label_and_subdomain_rules() -> None:
    assert name_problems("a" * 63, label=True) == []
    assert name_problems("a" * 64, label=True) == ["must be no more than 63 characters"]
    assert name_problems("a.b", label=True) and not name_problems("a.b", label=False)
    assert name_problems("a" * 254, label=False) == ["must be no more than 253 characters"]
