"""The schemas scenario manifests are validated against, by ``(apiVersion, kind)``.

* Queue, PodGroup, Topology: the ``openAPIV3Schema`` of the CRDs the chart ships
  (``deploy/helm/kai-stream/templates/crds.yaml``), descriptions left out; ``tests/deploy/test_schemas_sync.py``
  keeps the two equal.
* Pod, Node, PriorityClass: the field names of the Kubernetes v1 API, compact: every field is known by name,
  and only the parts kai-stream reads (metadata, container resources, the scheduling fields) are described
  further; the rest is accepted as any value.
"""

from __future__ import annotations

from typing import Any

from kai_stream.core.schema import PRESERVE, Schema

__all__ = ["SCHEMAS"]

ANY: Schema = {PRESERVE: True}
STRING: Schema = {"type": "string"}
MAP: Schema = {"type": "object", "additionalProperties": ANY}


def _known(*names: str, **described: Schema) -> dict[str, Any]:
    """An object whose fields are ``names`` (any value) and ``described`` (with their own schema)."""
    return {"type": "object", "properties": {**dict.fromkeys(names, ANY), **described}}


OBJECT_META = _known(
    "generateName", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
    "deletionGracePeriodSeconds", "ownerReferences", "finalizers", "managedFields", "selfLink",
    name=STRING, namespace=STRING, labels=MAP, annotations=MAP,
)  # fmt: skip
RESOURCE_REQUIREMENTS = _known("claims", limits=MAP, requests=MAP)
CONTAINER = _known(
    "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resizePolicy", "restartPolicy",
    "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
    "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "securityContext", "stdin",
    "stdinOnce", "tty",
    name=STRING, resources=RESOURCE_REQUIREMENTS,
)  # fmt: skip
POD_SPEC = _known(
    "volumes", "ephemeralContainers", "restartPolicy", "terminationGracePeriodSeconds", "activeDeadlineSeconds",
    "dnsPolicy", "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "hostNetwork", "hostPID",
    "hostIPC", "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname", "subdomain",
    "hostAliases", "dnsConfig", "readinessGates", "runtimeClassName", "enableServiceLinks", "preemptionPolicy",
    "overhead", "topologySpreadConstraints", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates",
    "resourceClaims", "priority", "affinity", "tolerations",
    containers={"type": "array", "items": CONTAINER},
    initContainers={"type": "array", "items": CONTAINER},
    nodeSelector=MAP, nodeName=STRING, schedulerName=STRING, priorityClassName=STRING,
    resources=RESOURCE_REQUIREMENTS,
)  # fmt: skip
POD = _known(apiVersion=STRING, kind=STRING, metadata=OBJECT_META, spec=POD_SPEC, status=ANY)
NODE = _known(
    apiVersion=STRING,
    kind=STRING,
    metadata=OBJECT_META,
    spec=_known("podCIDR", "podCIDRs", "providerID", "unschedulable", "taints", "configSource", "externalID"),
    status=_known(
        "conditions", "addresses", "daemonEndpoints", "nodeInfo", "images", "volumesInUse", "volumesAttached",
        "config", "phase", "runtimeHandlers", "features",
        capacity=MAP, allocatable=MAP,
    ),
)
PRIORITY_CLASS = _known(
    "value", "globalDefault", "description", "preemptionPolicy", apiVersion=STRING, kind=STRING, metadata=OBJECT_META
)


def _crd_root(spec: Schema, *, status: bool = True) -> dict[str, Any]:
    properties: dict[str, Any] = {"apiVersion": STRING, "kind": STRING, "metadata": {"type": "object"}, "spec": spec}
    if status:
        properties["status"] = {"type": "object", PRESERVE: True}
    return {"type": "object", "properties": properties}


_QUEUE_RESOURCE = {
    "type": "object",
    "properties": {"quota": {"type": "number"}, "overQuotaWeight": {"type": "number"}, "limit": {"type": "number"}},
}
QUEUE = _crd_root(
    {
        "type": "object",
        PRESERVE: True,
        "properties": {
            "displayName": STRING,
            "parentQueue": STRING,
            "priority": {"type": "integer"},
            "preemptMinRuntime": {"x-kubernetes-int-or-string": True},
            "reclaimMinRuntime": {"x-kubernetes-int-or-string": True},
            "minRuntime": {"x-kubernetes-int-or-string": True},
            "resources": {
                "type": "object",
                "properties": {"gpu": _QUEUE_RESOURCE, "cpu": _QUEUE_RESOURCE, "memory": _QUEUE_RESOURCE},
            },
        },
    }
)
_TOPOLOGY_CONSTRAINT = {
    "type": "object",
    "properties": {"topology": STRING, "requiredTopologyLevel": STRING, "preferredTopologyLevel": STRING},
}
POD_GROUP = _crd_root(
    {
        "type": "object",
        PRESERVE: True,
        "properties": {
            "minMember": {"type": "integer", "format": "int32", "minimum": 0},
            "queue": STRING,
            "priorityClassName": STRING,
            "preemptibility": {"type": "string", "enum": ["preemptible", "non-preemptible"]},
            "topologyConstraint": _TOPOLOGY_CONSTRAINT,
            "subGroups": {
                "type": "array",
                "items": {
                    "type": "object",
                    PRESERVE: True,
                    "properties": {
                        "name": STRING,
                        "minMember": {"type": "integer", "format": "int32"},
                        "parent": STRING,
                        "topologyConstraint": _TOPOLOGY_CONSTRAINT,
                    },
                },
            },
        },
    }
)
TOPOLOGY = _crd_root(
    {
        "type": "object",
        PRESERVE: True,
        "required": ["levels"],
        "properties": {
            "levels": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "object", "required": ["nodeLabel"], "properties": {"nodeLabel": STRING}},
            }
        },
    }
)

SCHEMAS: dict[tuple[str, str], Schema] = {
    ("v1", "Pod"): POD,
    ("v1", "Node"): NODE,
    ("scheduling.k8s.io/v1", "PriorityClass"): PRIORITY_CLASS,
    ("scheduling.run.ai/v2", "Queue"): QUEUE,
    ("scheduling.run.ai/v2alpha2", "PodGroup"): POD_GROUP,
    ("kai.scheduler/v1alpha1", "Topology"): TOPOLOGY,
}
