"""The emulated cluster: how the binder, the kubelets and the connector answer the scheduler's decisions.

Pure (no broker, no Kubernetes, no clock): ``outcomes`` builds the binder's outcomes with the one id scheme
the live binder uses too; ``react`` turns a decision into the events it causes, under a ``Policy`` (who is
re-created after an eviction, termination grace, which intermediate observations are made); ``finishing``
queues the completions of pods that run for their ``duration_s``, for every clock; ``cluster``
keeps the cluster-events log with per-partition offsets as ``simulate`` models it. The clocks that drive it
(``kai_stream.simulate``, ``kai_stream.replay.engine`` for what-ifs, ``kai_stream.trace.simulator``) only decide when
things happen; each steps the scheduler with ``kai_stream.core.decide``.
"""

from kai_stream.emulation.cluster import DEFAULT_TERMINATION_GRACE_S, ClusterLog, EmulatedCluster, round_barrier
from kai_stream.emulation.finishing import Completion, Finishing
from kai_stream.emulation.outcomes import (
    bind_failed,
    eviction_failed,
    outcome_id,
    outcome_of,
    pod_bound,
    pod_evicted,
)
from kai_stream.emulation.react import (
    LABEL_RECREATE,
    Marks,
    Policy,
    finished,
    finishes_at,
    pending_message,
    pod_removed,
    react,
    recreated_after_eviction,
    recreated_uid,
    removal,
)
from kai_stream.emulation.recorded import Emulation, emulation_json, emulation_of

__all__ = [
    "DEFAULT_TERMINATION_GRACE_S",
    "LABEL_RECREATE",
    "ClusterLog",
    "Completion",
    "EmulatedCluster",
    "Emulation",
    "Finishing",
    "Marks",
    "Policy",
    "bind_failed",
    "emulation_json",
    "emulation_of",
    "eviction_failed",
    "finished",
    "finishes_at",
    "outcome_id",
    "outcome_of",
    "pending_message",
    "pod_bound",
    "pod_evicted",
    "pod_removed",
    "react",
    "recreated_after_eviction",
    "recreated_uid",
    "removal",
    "round_barrier",
]
