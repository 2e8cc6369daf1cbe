"""The simulated API server refuses object names the real one refuses (RFC 1123 subdomain / label, lengths)
with 422 Invalid, over HTTP."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from kai_stream.connectors.simcluster.names import name_problems
from tests.kube_calls import send, status_of

from .manifests import node, pod


@pytest.mark.parametrize("name", ["x" * 10_000, "../../etc", "Upper", "-lead", "trail-", "a_b", "a/b", "", "a..b"])
async def test_bad_pod_and_node_names_get_422(v1: client.CoreV1Api, name: str) -> None:
    creates: tuple[Callable[[], Awaitable[Any]], ...] = (
        lambda: send(v1.create_namespaced_pod, "default", pod(name)),
        lambda: send(v1.create_node, node(name)),
    )
    for create in creates:
        with pytest.raises(ApiException) as caught:
            await create()
        assert caught.value.status == 422
        status = status_of(caught.value)
        assert status["reason"] == "Invalid" and "metadata.name" in status["message"]
        assert len(caught.value.body or b"") < 2000
    assert (await v1.list_namespaced_pod("default")).items == [] and (await v1.list_node()).items == []


async def test_valid_names_are_accepted(v1: client.CoreV1Api) -> None:
    created = await send(v1.create_namespaced_pod, "team-a", pod("a.b-1", "team-a"))
    assert created.metadata.name == "a.b-1"
    await send(v1.create_node, node("n" * 253))
    with pytest.raises(ApiException) as caught:
        await send(v1.create_namespaced_pod, "Bad_NS", pod("ok", "Bad_NS"))
    assert caught.value.status == 422 and "metadata.namespace" in status_of(caught.value)["message"]


def test_label_and_subdomain_rules() -> None:
    assert name_problems("a" * 63, label=True) == []
    assert name_problems("a" * 64, label=True) == ["must be no more than 63 characters"]
    assert name_problems("a.b", label=True) and not name_problems("a.b", label=False)
    assert name_problems("a" * 254, label=False) == ["must be no more than 253 characters"]
