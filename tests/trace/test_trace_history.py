"""A trace run's history is a log like a live one: it replays identically, its hash chain verifies, and
explain tells an evicted pod's story from it (ITP slice); an Alibaba openb run places fractional pods sharing
GPUs and replays identically too."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from kai_stream.cli import _register, app
from kai_stream.core.config import SchedulerConfig
from kai_stream.core.events import (
    BindRequested,
    Decision,
    EvictionRequested,
    PodObserved,
    PodRemoved,
    dumps,
    loads_cluster_event,
    loads_decisions_record,
)
from kai_stream.emulation import emulation_of
from kai_stream.explain import explain_pod
from kai_stream.history.reader import History, read_history
from kai_stream.history.schema import scan_history
from kai_stream.replay.engine import run_engine
from kai_stream.replay.testing import assert_replays_identically
from kai_stream.replay.whatif import WhatIfSpec, observed_cycles, run_whatif
from tests.trace.itp_slice import simulate_itp_slice

DATA = Path(__file__).parent / "data"
OPENB_NODES = DATA / "openb_tiny_nodes.csv"
OPENB_PODS = DATA / "openb_tiny_pods.csv"


@pytest.fixture(scope="module")
def itp_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    history, stats = simulate_itp_slice(tmp_path_factory.mktemp("itp"))
    assert stats.jobs == 80 and stats.unfinished_pods == 0 and stats.evictions > 0
    return history


def _cli(*args: str) -> tuple[int, str]:
    _register()
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_itp_trace_history_replays_identically(itp_history: Path) -> None:
    history = read_history(itp_history)
    actions = {d.action for d in history.pools["default"].decisions if isinstance(d, EvictionRequested)}
    assert "reclaim" in actions  # the slice reclaims, so evictions and the restarts after them are replayed
    report = assert_replays_identically(history)
    assert report.identical == report.decisions == history.decisions > 0
    code, out = _cli("replay", "--from-history", str(itp_history), "--json")
    assert code == 0, out
    assert orjson.loads(out[out.index("{") :])["identical"] == history.decisions


def test_itp_trace_history_audit_verifies(itp_history: Path) -> None:
    code, out = _cli("audit", "verify", "--from-history", str(itp_history), "--json")
    assert code == 0, out
    verdict = orjson.loads(out)
    assert verdict["ok"] is True and verdict["checked"] == read_history(itp_history).decisions
    code, out = _cli("audit", "invariants", str(itp_history), "--json")
    assert code == 0, out
    invariants = orjson.loads(out)
    assert invariants["ok"] is True and invariants["decisions"] == verdict["checked"]
    assert invariants["pods"]["evicted"] + invariants["pods"]["deleted"] > 0


def test_explain_a_reclaimed_trace_pod(itp_history: Path) -> None:
    history = read_history(itp_history)
    eviction = next(
        d for d in history.pools["default"].decisions if isinstance(d, EvictionRequested) and d.action == "reclaim"
    )
    (story,) = explain_pod(history, f"{eviction.namespace}/{eviction.name}")
    kinds = [s.kind for s in story.steps]
    assert kinds[0] == "Arrived" and kinds[-2:] == ["Finished", "Removed"]  # restarted after eviction, then done
    decided = next(s for s in story.steps if s.kind == "EvictionDecided" and s.ts == eviction.ts)
    assert decided.data["action"] == "reclaim" and decided.data["preemptor"] == eviction.preemptor
    assert decided.data["preemptor_queue"] == eviction.details["reclaimer_queue"]
    assert decided.standing is not None
    victim = decided.standing[eviction.queue]
    assert victim.allocated_gpu == float(eviction.details["victim_gpu_allocated"])
    assert victim.fair_share_gpu == float(eviction.details["victim_gpu_fair_share"])
    after = kinds[kinds.index("EvictionDecided") :]
    assert after[:2] == ["EvictionDecided", "Evicted"] and "Bound" in after  # bound again after the eviction
    code, out = _cli("explain", story.pod, "--from-history", str(itp_history))
    assert code == 0, out
    reclaimer = eviction.details["reclaimer_queue"]
    assert f"reclaim: eviction decided for {eviction.preemptor} (queue {reclaimer})" in " ".join(out.split())


# ---------------------------------------------------------------------- Alibaba openb, fractional GPUs


@pytest.fixture(scope="module")
def openb_history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    root = tmp_path_factory.mktemp("openb")
    cluster = root / "cluster.yaml"
    code, out = _cli("trace", "openb-nodes", str(OPENB_NODES), "--output", str(cluster))
    assert code == 0, out
    code, out = _cli(
        "trace", "run", str(OPENB_PODS), "--format", "alibaba-openb", "--cluster", str(cluster),
        "--history", str(root / "h"), "--json",
    )  # fmt: skip
    assert code == 0, out
    payload: dict[str, object] = orjson.loads(out)
    return root / "h", payload


def _gpu_intervals(history: History) -> dict[tuple[str, int], list[tuple[float, float, int, str]]]:
    """Per (node, GPU index): (bound, removed, gpu_milli, pod) of every pod that ran on it."""
    log = history.pools["default"]
    milli = {e.pod.uid: e.pod.requests.gpu_milli for e in log.events if isinstance(e, PodObserved)}
    removed = {e.uid: e.ts for e in log.events if isinstance(e, PodRemoved)}
    out: dict[tuple[str, int], list[tuple[float, float, int, str]]] = defaultdict(list)
    for d in log.decisions:
        if isinstance(d, BindRequested):
            for index in d.gpu_indices:
                share = milli[d.uid] if milli[d.uid] < 1000 else 1000
                out[(d.node, index)].append((d.ts, removed[d.uid], share, d.name))
    return out


def test_openb_fractional_pods_share_gpus(openb_history: tuple[Path, dict[str, object]]) -> None:
    directory, payload = openb_history
    stats = payload["simulation"]
    assert isinstance(stats, dict)
    assert (stats["jobs"], stats["binds"], stats["unfinished_pods"]) == (8, 8, 0)
    history = read_history(directory)
    milli = {
        e.pod.name: e.pod.requests.gpu_milli for e in history.pools["default"].events if isinstance(e, PodObserved)
    }
    assert sorted(milli.values()) == [0, 250, 250, 460, 500, 500, 1000, 2000]
    shared_gpus = 0
    for (node, index), runs in _gpu_intervals(history).items():
        moments = sorted({start for start, _, _, _ in runs})
        peak = max(len([r for r in runs if r[0] <= t < r[1]]) for t in moments)
        load = max(sum(r[2] for r in runs if r[0] <= t < r[1]) for t in moments)
        assert load <= 1000, (node, index, runs)  # never more than one whole GPU's worth on a GPU
        for start, end, share, name in runs:
            if share == 1000:  # a whole-GPU pod has its GPU to itself
                assert all(r[3] == name or not (r[0] < end and start < r[1]) for r in runs), (node, index, runs)
        shared_gpus += peak >= 2
    assert shared_gpus >= 2  # both 500s on one GPU, the 250s and the 460 on another


def test_openb_history_replays_identically_and_verifies(openb_history: tuple[Path, dict[str, object]]) -> None:
    directory, _ = openb_history
    history = read_history(directory)
    fractional = [
        d for d in history.pools["default"].decisions if isinstance(d, BindRequested) and len(d.gpu_indices) == 1
    ]
    assert len(fractional) >= 6
    report = assert_replays_identically(history)
    assert report.identical == history.decisions
    code, out = _cli("audit", "verify", "--from-history", str(directory), "--json")
    assert code == 0 and orjson.loads(out)["ok"] is True, out


@pytest.mark.parametrize("which", ["itp", "openb"])
def test_every_history_value_is_the_canonical_dumps(
    which: str, itp_history: Path, openb_history: tuple[Path, dict[str, object]]
) -> None:
    """The simulator encodes its own events without pydantic's dump (``simulator._encode``): every row's value
    is still ``dumps`` of the record it decodes to, byte for byte."""
    directory = itp_history if which == "itp" else openb_history[0]
    rows = scan_history(directory).select("topic", "type", "value").collect().rows()
    assert {t for _, t, _ in rows} >= {"PodObserved", "PodBound", "FairShareRecorded", "PodPending", "ConfigRecorded"}
    if which == "itp":
        assert {t for _, t, _ in rows} >= {"PodEvicted", "EvictionRequested", "PodGroupRemoved", "PodRemoved"}
    for topic, _, value in rows:
        loads = loads_decisions_record if topic == "decisions" else loads_cluster_event
        assert dumps(loads(value.encode())).decode() == value


def _story(decisions: list[Decision]) -> list[tuple[object, ...]]:
    return [
        (type(d).__name__, d.uid, d.ts, getattr(d, "node", None), getattr(d, "gpu_indices", None), d.action)
        for d in decisions
    ]


def test_whatif_of_a_trace_history_under_its_own_policy_reproduces_its_decisions(itp_history: Path) -> None:
    history = read_history(itp_history)
    log = history.pools["default"]
    recorded = emulation_of(log.configs[-1].emulation)
    assert recorded is not None and recorded.policy.recreate == "restart" and recorded.cycle_every == 0
    evicted = sum(1 for d in log.decisions if isinstance(d, EvictionRequested))
    assert evicted > 0
    pool = run_whatif(history, WhatIfSpec()).pools["default"]
    for side in (pool.baseline, pool.whatif):
        assert sum(len(o.evictions) for o in side.values()) == evicted
    assert pool.baseline_decisions == pool.whatif_decisions == len(log.decisions)
    assert pool.changed_pods() == []
    rerun = run_engine(
        (), SchedulerConfig(), cycles=observed_cycles(log, by_time=True), emulation=recorded,
        max_cycles=recorded.max_cycles,
    )
    assert _story(rerun.log.decisions) == _story(log.decisions)
