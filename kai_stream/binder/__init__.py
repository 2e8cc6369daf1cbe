"""The binder: turns scheduler decisions into Kubernetes API calls and reports what happened.

``plan`` (pure) decides which actions a batch needs; ``KubeApplier`` performs them idempotently through
kubernetes-asyncio; ``run_binder`` is the consumer loop (decisions topic in; bind-results and
cluster-events out; commit after the API calls).
"""

from kai_stream.binder.kube import KubeApplier, RetryPolicy
from kai_stream.binder.plan import Action, Bind, Evict, MarkUnschedulable, lanes, plan
from kai_stream.binder.runner import DEFAULT_GROUP_ID, Binder, run_binder
from kai_stream.emulation.react import pending_message

__all__ = [
    "DEFAULT_GROUP_ID",
    "Action",
    "Bind",
    "Binder",
    "Evict",
    "KubeApplier",
    "MarkUnschedulable",
    "RetryPolicy",
    "lanes",
    "pending_message",
    "plan",
    "run_binder",
]
