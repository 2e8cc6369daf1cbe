"""The simulated cluster: the Kubernetes REST API over HTTP (aiohttp) plus simulated kubelets, so that
kubernetes-asyncio talks to it exactly as to a real apiserver (in the spirit of KWOK).

Serves core/v1 pods, nodes, namespaces, events; scheduling.k8s.io/v1 priorityclasses; the KAI custom
resources queues (scheduling.run.ai/v2, cluster), podgroups (scheduling.run.ai/v2alpha2, namespaced) and
topologies (kai.scheduler/v1alpha1, cluster); discovery (/api, /apis, /version); create/get/replace/
patch/delete/deletecollection; list (label and field selectors, limit/continue) and watch (NDJSON from a
resourceVersion, BOOKMARKs, timeoutSeconds, 410 Expired when the bounded history no longer covers it);
`/status`, `pods/binding` and `pods/eviction` subresources; every error is a `Status` object.
A namespaced object in a namespace that does not exist creates the namespace (lenient on purpose).

Usage::

    async with SimCluster(time_scale=0.01) as sim:          # or: url = await sim.start()
        sim.load_scenario_file("examples/scenario.yaml")
        async with api_client(sim.url) as api:
            v1 = CoreV1Api(api)
            ...
        sim.bindings                                         # every binding POST, timestamped server-side

How clients must call it (the same holds against a real apiserver; the contract tests prove each one):

* Binding: the server answers 201 with a `Status` body, which kubernetes-asyncio cannot turn into a
  V1Binding (it raises ValueError on the missing `target`). Call
  ``create_namespaced_pod_binding(name, ns, body, _preload_content=False)``; with that flag the client
  raises nothing for error codes, so check ``response.status`` (201 bound; 404 no pod; 409 Conflict: already
  bound, or being deleted; treat 409 as done when the pod is bound to the intended node) and read the
  `Status` body with ``await response.read()``.
* Custom-object patches: CustomObjectsApi picks ``application/json-patch+json`` for a dict body, which
  needs a list of operations; pass ``_content_type="application/merge-patch+json"`` for a merge patch.
  Strategic merge patch on a custom resource is 415, as on a real cluster; server-side apply
  (``application/apply-patch+yaml``) and any other patch type are 415 here.
* Watches: a too-old resourceVersion yields an ERROR event with a 410 Expired `Status`; the client raises
  ApiException(status=410) (after one silent retry from the same version when no timeout_seconds was
  given). The caller must then re-list and watch again from the list's metadata.resourceVersion.
* Pod spec is immutable after create except the fields Kubernetes allows: ``spec.nodeName`` is set only
  by the binding subresource. The main resource ignores `status`; write it through ``/status``.

Where it differs from kube-apiserver v1.34.4 (found by the contract suite, ``tests/apiserver``, which runs the
same tests against both): deleting a pod is one DELETED event here, while kube-apiserver first writes
``deletionTimestamp`` (a MODIFIED event) even with grace 0; a ``/status`` write ignores metadata here, while
kube-apiserver keeps label changes sent with it; bookmarks come every ``bookmark_interval`` here, while
kube-apiserver sends them rarely (none within a 4 s watch); a watch from a resourceVersion older than the
bounded history is 410 here, while kube-apiserver's watch cache served resourceVersion 1 even after an etcd
compaction; a namespaced object in a missing namespace creates it here and is 404 there; a pod naming a
PriorityClass that does not exist is accepted here (without ``spec.priority``) and refused there (403), and a pod
without a class gets no ``spec.priority`` here and 0 there (a class that exists sets it on both); a new node
gets no taint here and ``node.kubernetes.io/not-ready:NoSchedule`` there (TaintNodesByCondition), lifted by
the node lifecycle controller, which the project's control plane does not run.

Simulated kubelets (only for pods bound to an existing Node): a bound pod turns Running after
`start_delay`; a pod annotated ``kai.scheduler/duration-seconds: "N"`` turns Succeeded N simulated
seconds later (× `time_scale` in wall seconds); a deleted or evicted running pod is removed at once, or
after `termination_grace` with metadata.deletionTimestamp set first. With ``enforce_capacity=True`` a pod
that does not fit next to the node's running pods is rejected (Failed, reason ``OutOf<resource>``).

For tests and benchmarks: ``sim.get("pods/ns/name")``, ``sim.objects("pods")``, ``await sim.create(obj)``,
``await sim.wait_until(predicate)`` (re-checked on every change, no polling), ``sim.bindings`` (every
binding POST: code, server-side ``perf_counter`` time, and the pod's creation time in this server, so
``record.latency`` is pod-created -> binding-POST; the same records as JSON at
``GET /debug/simcluster/bindings`` when the cluster runs in another process). Under load, pass
``freeze_gc=True`` in a process that exists to serve (see `SimCluster`), and let clients read watch events
as ``raw_object`` dicts: building V1Pod models in kubernetes-asyncio costs far more CPU than this server
spends per event.
"""

from kai_stream.connectors.simcluster.client import api_client, kube_client_config
from kai_stream.connectors.simcluster.errors import ApiError
from kai_stream.connectors.simcluster.kubelet import DURATION_ANNOTATION
from kai_stream.connectors.simcluster.records import BindingRecord, EvictionRecord
from kai_stream.connectors.simcluster.scenario import ScenarioError, read_documents
from kai_stream.connectors.simcluster.server import SimCluster

__all__ = [
    "DURATION_ANNOTATION",
    "ApiError",
    "BindingRecord",
    "EvictionRecord",
    "ScenarioError",
    "SimCluster",
    "api_client",
    "kube_client_config",
    "read_documents",
]
