"""``run_cycle``: the one entry point of the pure scheduler. State in, decisions out, nothing mutated.

Decision ids are ``stable_id(pool, str(input_offset), uid, type)``; the caller folds the returned decisions
into its state with ``state.apply`` (a ``PodPending`` whose reason did not change since the last one folded
is not emitted again). ``fair_shares`` reports the same fair shares the cycle uses.

Python's cyclic garbage collector is paused while a cycle runs (``core.gcpause``): the session allocates hundreds
of thousands of small linked objects next to a much larger live ``ClusterState``, and the collections they
trigger would keep rescanning that state (what it cost: benchmarks/README.md). Decisions do not depend on it.

The cycle builds the configured plugins (``scheduler.plugins``) for each session it opens and runs the configured
actions (``scheduler.actions``) by name; the config admits only registered names.

A bind of a pod with DRA claim requests carries the node's devices for them (``core.dra.allocate``, from the GPU
indices the actions chose).

A cycle on the pool's kept snapshot opens no session when it provably decides nothing (``core.quiet.idle``: no
pending task, no stale gang): the streaming processor runs a cycle for every batch, most of them on feedback
events (binds confirmed, pods running) with nothing pending.
"""

from __future__ import annotations

from collections.abc import Callable

import kai_stream
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.dra import allocate
from kai_stream.core.events import BindRequested, Decision
from kai_stream.core.gcpause import paused_gc
from kai_stream.core.quiet import decides_nothing
from kai_stream.core.scheduler.actions import ACTIONS
from kai_stream.core.scheduler.framework.info import CPU, GPU, MEM, UNIT
from kai_stream.core.scheduler.framework.plugins import Plugin
from kai_stream.core.scheduler.framework.reuse import (
    discard,
    kept_snapshot,
    open_session,
    open_tracked_session,
    park_session,
    repark,
)
from kai_stream.core.scheduler.framework.session import Session
from kai_stream.core.scheduler.plugins import build_plugins
from kai_stream.core.state import ClusterState

__all__ = ["fair_shares", "plugins_of", "run_actions", "run_cycle"]

MB = 10**6


def run_cycle(
    state: ClusterState,
    config: SchedulerConfig,
    *,
    pool: str,
    input_offset: int,
    code_version: str = kai_stream.__version__,
    reuse: bool = True,
    inspect: Callable[[Session], None] | None = None,
) -> list[Decision]:
    """Run the configured actions over a snapshot of ``pool`` and return their decisions, in order.

    With ``reuse`` the pool's snapshot is kept in ``state.derived`` after the cycle and the next cycle on this
    state rebuilds only the jobs the fold changed since (the same decisions as without: ``reuse=False`` builds
    everything from the state, as benchmarks of a cold cycle do). ``inspect`` is called with the closed session
    (its queues carry the cycle's fair shares and allocations) before the snapshot is put back for the next cycle;
    it must not keep the session."""
    with paused_gc():
        if not reuse:
            session = open_session(
                state, config, plugins_of(config), pool=pool, input_offset=input_offset, code_version=code_version
            )
            run_actions(session, config)
            decisions = _with_devices(state, session.close())
            if inspect is not None:
                inspect(session)
            discard(session)
            return decisions
        snapshot = kept_snapshot(state, config, pool=pool)
        if inspect is None and decides_nothing(snapshot, state, config):
            repark(state, snapshot)
            return []
        session = snapshot.start(
            state, config, plugins_of(config), input_offset=input_offset, code_version=code_version, track=True
        )
        run_actions(session, config)
        decisions = _with_devices(state, session.close())
        if inspect is not None:
            inspect(session)
        park_session(state, session, snapshot)
        return decisions


def _with_devices(state: ClusterState, decisions: list[Decision]) -> list[Decision]:
    """``decisions`` with each bind of a pod with DRA claim requests carrying the devices allocated to them."""
    out: list[Decision] = []
    for decision in decisions:
        if isinstance(decision, BindRequested):
            pod = state.pods.get(decision.uid)
            node = state.nodes.get(decision.node)
            if pod is not None and pod.dra_requests and node is not None:
                devices = allocate(pod, node, decision.gpu_indices)
                decision = decision.model_copy(update={"dra_devices": devices})
        out.append(decision)
    return out


def plugins_of(config: SchedulerConfig) -> list[Plugin]:
    """The plugins ``config`` names, fresh for one session, in hook order."""
    return build_plugins(config.plugins)


def run_actions(session: Session, config: SchedulerConfig) -> None:
    """Run the actions ``config`` names on ``session``, in order."""
    for name in config.actions:
        ACTIONS[name](session)


def fair_shares(state: ClusterState, config: SchedulerConfig, pool: str) -> dict[str, dict[str, float]]:
    """Fair share per queue in ``pool``: gpu in devices, cpu in millicores, memory in MB (10^6 bytes).

    Opens the session as a cycle would (on the pool's kept snapshot when there is one) and runs no action."""
    with paused_gc():
        session, snapshot = open_tracked_session(
            state, config, plugins_of(config), pool=pool, input_offset=state.offset, code_version=""
        )
        shares = {
            name: {
                "gpu": q.fair_share[GPU] / UNIT,
                "cpu": float(q.fair_share[CPU]),
                "memory": q.fair_share[MEM] / MB,
            }
            for name, q in sorted(session.queues.items())
        }
        park_session(state, session, snapshot)
    return shares
