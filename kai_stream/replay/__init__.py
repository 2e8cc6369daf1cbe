"""Replay, diff and what-if over a recorded kai-stream log (Parquet history or broker).

``replay_history`` rebuilds every decision with the pure core and compares bytes; ``run_whatif`` re-runs the
observed part of a history under another config; ``assert_replays_identically`` is the helper tests call.
"""

from kai_stream.replay.diff import Divergence, field_diff, render_divergence
from kai_stream.replay.engine import EngineRun, run_engine
from kai_stream.replay.runner import PoolReplay, ReplayReport, replay_history, replay_pool
from kai_stream.replay.simulated import replay_simulation
from kai_stream.replay.testing import assert_replays_identically, assert_simulation_replays_identically

__all__ = [
    "Divergence",
    "EngineRun",
    "PoolReplay",
    "ReplayReport",
    "assert_replays_identically",
    "assert_simulation_replays_identically",
    "field_diff",
    "render_divergence",
    "replay_history",
    "replay_pool",
    "replay_simulation",
    "run_engine",
]
