"""Job aging: a 4-GPU job behind a stream of 1-GPU jobs on one 4-GPU node starves without it (the stream always
takes the one GPU that frees) and runs soon after ``holdAfter`` with it; the history replays identically; off,
the config (and its hash) is KAI's."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kai_stream.core.config import DEFAULT_PLUGINS, JobAging, SchedulerConfig, config_hash, parse_config
from kai_stream.core.events import BindRequested, PodPending
from kai_stream.history.reader import read_history
from kai_stream.replay.testing import assert_replays_identically
from kai_stream.trace.clusters import auto_queue_events, cluster_events, nodes_yaml
from kai_stream.trace.loaders import Trace
from kai_stream.trace.simulator import simulate_trace

STREAM_EVERY_S, STREAM_RUN_S, STREAM_JOBS = 25, 100, 160
BIG_SUBMIT_S, BIG_RUN_S = 1, 300


def _trace() -> Trace:
    rows = [
        {"job_id": f"small-{i:03d}", "submit": float(i * STREAM_EVERY_S), "duration": float(STREAM_RUN_S), "gpus": 1}
        for i in range(STREAM_JOBS)
    ]
    rows.append({"job_id": "big", "submit": float(BIG_SUBMIT_S), "duration": float(BIG_RUN_S), "gpus": 4})
    jobs = (
        pl.DataFrame(rows)
        .with_columns(
            gpu_milli=pl.col("gpus") * 1000, cpu_milli=pl.lit(1000, pl.Int64),
            memory=pl.lit(2**30, pl.Int64), queue=pl.lit("team"),
        )
        .sort(["submit", "job_id"])
    )
    return Trace(jobs=jobs, source="stream", format="generic")


def _run(tmp_path: Path, config: SchedulerConfig) -> tuple[Path, float, list[str]]:
    import yaml

    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump_all(nodes_yaml(1, 4, "64", "256Gi"), sort_keys=False))
    base = cluster_events(nodes)
    trace = _trace()
    history = tmp_path / "history"
    stats = simulate_trace(trace, base + auto_queue_events(base, trace.teams), config, history)
    assert stats.unfinished_pods == 0
    big = f"j{trace.jobs['job_id'].to_list().index('big'):06d}-0"
    log = read_history(history).pools["default"]
    bound = [d.ts for d in log.decisions if isinstance(d, BindRequested) and d.name == big]
    codes: list[str] = sorted({d.code for d in log.decisions if isinstance(d, PodPending)})
    assert len(bound) == 1
    return history, bound[0], codes


def test_the_big_job_starves_without_aging(tmp_path: Path) -> None:
    _, started, codes = _run(tmp_path, SchedulerConfig())
    assert started >= (STREAM_JOBS - 1) * STREAM_EVERY_S, started
    assert "HeldForStarvingJob" not in codes


def test_aging_ends_the_starvation_and_replays_identically(tmp_path: Path) -> None:
    config = parse_config({"jobAging": {"interval": "1m", "holdAfter": "10m"}})
    history, started, codes = _run(tmp_path, config)
    hold = 600
    assert hold < started <= hold + STREAM_RUN_S + STREAM_EVERY_S, started
    assert "HeldForStarvingJob" in codes
    assert_replays_identically(history)


def test_aging_without_hold_only_reorders(tmp_path: Path) -> None:
    """Order alone cannot end this starvation (the big job is already first in line): the hold does."""
    _, started, _ = _run(tmp_path, parse_config({"jobAging": {"holdAfter": 0}}))
    assert started >= (STREAM_JOBS - 1) * STREAM_EVERY_S


def test_aging_is_off_by_default_and_kai_compatible() -> None:
    default = SchedulerConfig()
    assert "aging" not in default.plugins and default.job_aging is None
    assert parse_config({"plugins": list(DEFAULT_PLUGINS)}) == default
    assert "job_aging" not in default.model_dump(exclude_none=True)
    assert config_hash(default) == config_hash(parse_config({}))
    on = parse_config({"jobAging": {}})
    assert on.plugins == (*DEFAULT_PLUGINS, "aging") and on.job_aging == JobAging()
    assert config_hash(on) != config_hash(default)
    assert parse_config({"plugins": [*DEFAULT_PLUGINS, "aging"]}).job_aging == JobAging()


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"jobAging": {"interval": 0}}, "jobAging.interval"),
        ({"jobAging": {"interval": "ten minutes"}}, "not a duration"),
        ({"jobAging": {"maxBoost": -1}}, "jobAging.maxBoost"),
        ({"jobAging": {"holdafter": "1h"}}, "holdafter"),
        ({"jobAging": {}, "plugins": ["predicates", "proportion"]}, "plugins does not name 'aging'"),
    ],
)
def test_aging_config_is_validated(block: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_config(block)
