"""The ITP slice (80 jobs of cluster07) simulated onto 4 nodes of 8 GPUs: one history several test modules read."""

from __future__ import annotations

from pathlib import Path

import yaml

from kai_stream.core.config import SchedulerConfig
from kai_stream.trace.clusters import auto_queue_events, cluster_events, nodes_yaml
from kai_stream.trace.loaders import load_trace
from kai_stream.trace.simulator import SimulationStats, simulate_trace

ITP = Path(__file__).parent / "data" / "itp_cluster07_head80.csv"


def simulate_itp_slice(root: Path) -> tuple[Path, SimulationStats]:
    """Writes the slice's history under ``root / "h"``; returns it with the simulation's figures."""
    cluster = root / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(nodes_yaml(4, 8, "64", "256Gi"), sort_keys=False))
    trace = load_trace(ITP, "itp")
    base = cluster_events(cluster)
    stats = simulate_trace(trace, base + auto_queue_events(base, trace.teams), SchedulerConfig(), root / "h")
    return root / "h", stats
