"""Digests of what the scheduler decides over a broad set of inputs, printed as JSON with whether the scheduler
was loaded compiled: ``python -m tests.core.compiled_digest [--sources]`` (``--sources``: from its sources).
test_compiled.py runs it both ways and compares.

Inputs: every scenario file of the core and eviction-action tests and of examples/ (simulated to a fixed point
with all five actions, plus the scenario's own config); bench_cycle's generated clusters, packed and scattered
(a cold cycle, the reused-snapshot cycle after it, and a cold cycle once the emulated cluster answered); and a
slice of the ITP cluster07 trace (tests/trace/data) through the trace simulator on 32 GPUs (the whole history).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _digest(chunks: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()[:16]


def scenario_digests() -> dict[str, str]:
    from kai_stream.core.config import parse_config
    from kai_stream.core.events import dumps
    from kai_stream.core.manifests import load_scenario
    from kai_stream.simulate import simulate
    from tests.core.harness import split

    out: dict[str, str] = {}
    files = [*(ROOT / "tests" / "core" / "scenarios").glob("*.yaml")]
    files += [*(ROOT / "tests" / "core_actions" / "scenarios").glob("*.yaml"), *(ROOT / "examples").glob("*.yaml")]
    for path in sorted(files):
        manifests, expect = split(path.read_text())
        config = parse_config(expect.get("config") or {})
        events = load_scenario(manifests, scheduler_name=config.scheduler_name, default_queue=config.default_queue)
        result = simulate(events, config, cycles=20)
        out[str(path.relative_to(ROOT))] = _digest(dumps(d) for d in result.decisions)
    return out


def cycle_digests() -> dict[str, str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_cycle

    from kai_stream.core.config import SchedulerConfig
    from kai_stream.core.events import dumps
    from kai_stream.core.scheduler.cycle import run_cycle

    out: dict[str, str] = {}
    for scatter in (False, True):
        state = bench_cycle.build(300, 3000, scatter=scatter)
        config = SchedulerConfig()
        for name, reuse in (("cold", False), ("reused", True)):
            made = run_cycle(state, config, pool="default", input_offset=state.offset, code_version="t", reuse=reuse)
            out[f"bench_cycle scatter={scatter} {name}"] = _digest(dumps(d) for d in made)
        bench_cycle.settle(state)
        made = run_cycle(state, config, pool="default", input_offset=state.offset, code_version="t", reuse=False)
        out[f"bench_cycle scatter={scatter} settled"] = _digest(dumps(d) for d in made)
    return out


def trace_digest() -> dict[str, str]:
    import polars as pl

    from kai_stream.core.config import SchedulerConfig
    from kai_stream.trace.clusters import auto_queue_events, cluster_events
    from kai_stream.trace.loaders import load_trace
    from kai_stream.trace.simulator import simulate_trace

    trace = load_trace(ROOT / "tests" / "trace" / "data" / "itp_cluster07_head80.csv", "itp")
    base = cluster_events(ROOT / "examples" / "clusters" / "gpu32.yaml")
    base += auto_queue_events(base, trace.teams)
    with tempfile.TemporaryDirectory(prefix="compiled-digest-") as tmp:
        simulate_trace(trace, base, SchedulerConfig(), Path(tmp) / "h")
        files = sorted((Path(tmp) / "h").rglob("*.parquet"))
        rows = (repr(pl.read_parquet(f).rows()).encode() for f in files)
        return {"trace itp cluster07 first 80 jobs on 32 GPUs": _digest(rows)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sources", action="store_true", help="load the scheduler from its sources")
    args = parser.parse_args()
    from kai_stream.core.scheduler import compiled, prefer_sources

    if args.sources:
        prefer_sources()
    digests = {**scenario_digests(), **cycle_digests(), **trace_digest()}
    print(json.dumps({"compiled": compiled(), "digests": digests}))


if __name__ == "__main__":
    main()
