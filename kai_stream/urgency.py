"""Which cluster-events records the scheduler must see at once, and which may wait to share a batch.

A record is *feedback* when folding it cannot change what the next cycle decides, because the scheduler's own
decision already put the same fact into its state: one of our pods observed bound to a node and still pending
or running there (not terminating), or a successful bind. Producers hold feedback for up to
``KafkaSettings.feedback_linger_ms`` so it travels in one batch with other records; everything else (a new
pending pod, a pod that finished or is going away, nodes, queues, pod groups, ticks, failed binds, evictions) is
sent at once, taking the held feedback along (``internals.expedite``). Holding feedback never reorders a partition:
one producer, one batch queue per partition. On Apache Kafka nothing is held (``quirks.feedback_linger_ms``): its
fetch does not grow with the number of batches. The processor folds feedback without running a cycle for it
(``streams/runtime.py``).
"""

from __future__ import annotations

from kai_stream.core.events import PodBound, PodObserved

_BOUND_PHASES = frozenset({"Pending", "Running"})


def is_feedback(event: object) -> bool:
    """True when ``event`` repeats what the scheduler already decided (see the module docstring)."""
    if isinstance(event, PodBound):
        return True
    if isinstance(event, PodObserved):
        pod = event.pod
        return pod.managed and pod.node_name is not None and pod.phase in _BOUND_PHASES and not pod.terminating
    return False
