"""Kubernetes connector: list + watch the API (kubernetes-asyncio) and publish observed events by pool."""

from kai_stream.connectors.kubernetes.connector import KubernetesConnector
from kai_stream.connectors.kubernetes.kinds import KINDS, WatchedKind

__all__ = ["KINDS", "KubernetesConnector", "WatchedKind"]
