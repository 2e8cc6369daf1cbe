"""The Kubernetes kinds the connector watches and how to list/watch each through kubernetes-asyncio.

Every call is made with ``_preload_content=False`` and the JSON is parsed here (orjson), so a 10,000-pod
list does not go through the generated model classes; list items get their ``kind``/``apiVersion`` back
(the API leaves them out of list items) before ``manifests.object_to_events`` reads them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

ListCall = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class WatchedKind:
    kind: str
    api_version: str
    group: str
    version: str
    plural: str
    cluster_wide: bool

    def list_call(self, api: client.ApiClient) -> ListCall:
        """The kubernetes-asyncio list function for this kind (cluster-wide list of every namespace)."""
        if self.kind == "Node":
            return client.CoreV1Api(api).list_node
        if self.kind == "Pod":
            return client.CoreV1Api(api).list_pod_for_all_namespaces
        if self.kind == "PriorityClass":
            return client.SchedulingV1Api(api).list_priority_class
        custom = client.CustomObjectsApi(api)

        async def list_custom(**kwargs: Any) -> Any:
            return await custom.list_cluster_custom_object(self.group, self.version, self.plural, **kwargs)

        return list_custom


KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("DeviceClass", "resource.k8s.io/v1", "resource.k8s.io", "v1", "deviceclasses", True),
    WatchedKind("ResourceSlice", "resource.k8s.io/v1", "resource.k8s.io", "v1", "resourceslices", True),
    WatchedKind("ResourceClaim", "resource.k8s.io/v1", "resource.k8s.io", "v1", "resourceclaims", False),
    WatchedKind(
        "ResourceClaimTemplate", "resource.k8s.io/v1", "resource.k8s.io", "v1", "resourceclaimtemplates", False
    ),
    WatchedKind("PriorityClass", "scheduling.k8s.io/v1", "scheduling.k8s.io", "v1", "priorityclasses", True),
    WatchedKind("Topology", "kai.scheduler/v1alpha1", "kai.scheduler", "v1alpha1", "topologies", True),
    WatchedKind("Queue", "scheduling.run.ai/v2", "scheduling.run.ai", "v2", "queues", True),
    WatchedKind("Node", "v1", "", "v1", "nodes", False),
    WatchedKind("PodGroup", "scheduling.run.ai/v2alpha2", "scheduling.run.ai", "v2alpha2", "podgroups", False),
    WatchedKind("Pod", "v1", "", "v1", "pods", False),
)
KIND_BY_NAME: dict[str, WatchedKind] = {k.kind: k for k in KINDS}
"""The DRA kinds (``resource.k8s.io``) come first: they give no events of their own but are counted into the pods and
nodes (``kai_stream.core.dra``), which the connector translates only once they have been listed."""
