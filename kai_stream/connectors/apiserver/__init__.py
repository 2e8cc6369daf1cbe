"""A real Kubernetes control plane for tests and local runs: etcd + kube-apiserver + KWOK on loopback.

``build`` builds etcd (go.etcd.io/etcd/server/v3, pinned in ``go/etcd/go.mod``), kube-apiserver
(k8s.io/kubernetes, ``go/kube-apiserver/go.mod``) and KWOK (``go/kwok/go.mod``) once into
``~/.cache/kai-stream/bin/``; ``chart`` renders the Helm chart's CRDs, RBAC and ServiceAccounts;
``controlplane.ControlPlane`` starts it all (TLS, token auth, RBAC authorization) and hands out an admin
kubeconfig and, per component, a kubeconfig with the chart's ServiceAccount token.

Usage::

    with ControlPlane() as plane:
        plane.kubeconfig                              # admin (system:masters)
        plane.service_account_kubeconfig("binder")    # only what the chart's ClusterRole grants
"""

from kai_stream.connectors.apiserver.build import BuildError
from kai_stream.connectors.apiserver.controlplane import ControlPlane, ControlPlaneError

__all__ = ["BuildError", "ControlPlane", "ControlPlaneError"]
