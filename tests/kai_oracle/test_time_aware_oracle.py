"""KAI's ``time-aware-simulator`` (its scheduler, binder and controllers on an envtest control plane, usage from
its fake usage database) and the core with time-based fair share on the same queues, nodes, jobs and usage
parameters end in the same allocations and fair shares per queue.

KAI's simulator runs on wall-clock 10 ms cycles and its usage window in seconds, so only the state it settles in
is compared, not the cycle-by-cycle path. The scenario: two teams under one department, 8 GPUs; team-a submits
4-GPU jobs without end, team-b one 2-GPU job. Fair shares: team-b its request (2), team-a the rest (6); team-a
runs one 4-GPU job (a second does not fit in what is left)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import yaml

from kai_stream.core.config import parse_config
from kai_stream.trace.clusters import cluster_events, nodes_yaml, queue_yaml
from kai_stream.trace.simulator import _Simulation
from tests.kai_oracle.oracle import run_time_aware

GPUS = 8
JOBS = {"team-a": (4, 10), "team-b": (2, 1)}
USAGE = {"windowSize": 10, "halfLifePeriod": 5, "kValue": 1.0}


def _kai_final() -> dict[str, tuple[float, float]]:
    config = {
        "cycles": 500, **USAGE,
        "nodes": [{"GPUs": GPUS, "count": 1}],
        "queues": [{"name": "default", "parent": ""},
                   *({"name": team, "parent": "default"} for team in JOBS)],
        "jobs": {team: {"GPUs": gpus, "numPods": 1, "numJobs": count} for team, (gpus, count) in JOBS.items()},
    }
    rows = run_time_aware(config)
    last = max(int(r["Time"]) for r in rows)
    return {r["QueueID"]: (float(r["Allocation"]), float(r["FairShare"])) for r in rows if int(r["Time"]) == last}


def _ours(tmp_path: Path) -> dict[str, tuple[float, float]]:
    docs = [*nodes_yaml(1, GPUS, "64", "256Gi"), queue_yaml("default", 0),
            *(queue_yaml(team, 0, parent="default") for team in JOBS)]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    config = parse_config({"kValue": USAGE["kValue"], "usageParams": {
        "windowSize": USAGE["windowSize"], "halfLifePeriod": USAGE["halfLifePeriod"]}})
    sim = _Simulation(cluster_events(cluster), config, pool="default", max_cycles=8)
    rows = [{"job_id": f"{team}-{i}", "submit": 0.0, "duration": 1e9, "gpus": gpus, "gpu_milli": gpus * 1000,
             "cpu_milli": 0, "memory": 0, "queue": team}
            for team, (gpus, count) in JOBS.items() for i in range(count)]
    for i, job in enumerate(pl.DataFrame(rows).to_dicts()):
        sim.arrive(i, job, 0.0)
    for ts in range(0, 120, 10):
        sim.cycle(float(ts))
    return {s.queue: (s.allocated.gpu_milli / 1000, s.fair_share.gpu_milli / 1000) for s in sim.shares}


def test_time_aware_simulator_settles_where_the_core_does(tmp_path: Path) -> None:
    ours = _ours(tmp_path)
    assert ours == {"default": (6.0, 8.0), "team-a": (4.0, 6.0), "team-b": (2.0, 2.0)}
    assert _kai_final() == ours
