"""Kubernetes connector: list + watch the API (kubernetes-asyncio) and publish observed events by pool."""

from connectors.kubernetes.connector import KubernetesConnector
from connectors.kubernetes.kinds import KINDS, WatchedKind

__all__ = ["KINDS", "KubernetesConnector", "WatchedKind"]
