"""``run_cycle``: the one entry point of the pure scheduler. State in, decisions out, nothing mutated.

Decision ids are ``stable_id(pool, str(input_offset), uid, type)``; the caller folds the returned decisions
into its state with ``state.apply`` (a ``PodPending`` whose reason did not change since the last one folded
is not emitted again). ``fair_shares`` reports the same fair shares the cycle uses.
"""

from __future__ import annotations

import kai_stream
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import Decision
from kai_stream.core.scheduler.actions import ACTIONS
from kai_stream.core.scheduler.framework.info import CPU, GPU, MEM, UNIT
from kai_stream.core.scheduler.framework.session import open_session
from kai_stream.core.state import ClusterState

__all__ = ["fair_shares", "run_cycle"]

MB = 10**6


def run_cycle(
    state: ClusterState,
    config: SchedulerConfig,
    *,
    pool: str,
    input_offset: int,
    code_version: str = kai_stream.__version__,
) -> list[Decision]:
    """Run the configured actions over a snapshot of ``pool`` and return their decisions, in order."""
    session = open_session(state, config, pool=pool, input_offset=input_offset, code_version=code_version)
    for name in config.actions:
        action = ACTIONS.get(name)
        if action is not None:
            action(session)
    return session.close()


def fair_shares(state: ClusterState, config: SchedulerConfig, pool: str) -> dict[str, dict[str, float]]:
    """Fair share per queue in ``pool``: gpu in devices, cpu in millicores, memory in MB (10^6 bytes)."""
    session = open_session(state, config, pool=pool, input_offset=state.offset, code_version="")
    return {
        name: {
            "gpu": q.fair_share[GPU] / UNIT,
            "cpu": float(q.fair_share[CPU]),
            "memory": q.fair_share[MEM] / MB,
        }
        for name, q in sorted(session.queues.items())
    }
