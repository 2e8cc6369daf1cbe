"""Analytics figures on a hand-built history against values computed by hand (see analytics_synthetic.py)."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest
from analytics_synthetic import write_history
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_stream.analytics import jain_index, summarize
from kai_stream.analytics.keys import Keys
from kai_stream.analytics.summary import Summary, _quantiles, _queue_quantiles
from kai_stream.history.schema import HISTORY_V2_COLUMNS


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> Summary:
    directory = tmp_path_factory.mktemp("history")
    write_history(directory)
    return summarize(directory, bins=50)


def test_utilization_and_allocation_are_time_weighted(summary: Summary) -> None:
    c = summary.cluster
    assert c["capacity_gpus"] == 8.0
    assert c["nodes"] == 2
    assert (c["start_s"], c["end_s"]) == (0.0, 200.0)
    # 2*20 + 6*20 + 6*60 + 4*40 + 4*50 = 880 GPU-seconds over 200 s
    assert c["avg_allocated_gpus"] == pytest.approx(4.4)
    assert c["utilization"] == pytest.approx(0.55)
    queues = {q["queue"]: q for q in summary.queues}
    assert queues["a"]["avg_allocated_gpus"] == pytest.approx(3.0)
    assert queues["b"]["avg_allocated_gpus"] == pytest.approx(1.4)


def test_fragmentation_counts_free_gpus_on_partly_used_nodes(summary: Summary) -> None:
    # only n1 is ever partly used: 2 GPUs free there for 100 s of 200
    assert summary.cluster["avg_stranded_gpus"] == pytest.approx(1.0)
    assert summary.cluster["stranded_share_of_free"] == pytest.approx(1.0 / 3.6)


def test_queueing_delay_and_jct(summary: Summary) -> None:
    delay = summary.cluster["queueing_delay_s"]
    # delays 10 (p1), 30 (p2: first bind), 10 (p3)
    assert delay["p50"] == pytest.approx(10.0)
    assert delay["avg"] == pytest.approx(50 / 3)
    assert delay["p90"] == pytest.approx(26.0)
    assert delay["p99"] == pytest.approx(29.6)
    # JCT: j1 110, j2 200 (restarted after the reclaim), j3 110
    assert summary.cluster["jobs_completed"] == 3
    assert summary.cluster["jct_s"]["avg"] == pytest.approx(140.0)
    queues = {q["queue"]: q for q in summary.queues}
    assert queues["a"]["jct_s"]["avg"] == pytest.approx(110.0)
    assert queues["b"]["queueing_delay_s"]["p50"] == pytest.approx(30.0)


def test_evictions_suffered_and_caused(summary: Summary) -> None:
    assert summary.cluster["evictions"] == 1
    assert summary.cluster["evictions_by_action"] == {"reclaim": 1}
    queues = {q["queue"]: q for q in summary.queues}
    assert queues["b"]["evictions_suffered"] == {"reclaim": 1}
    assert queues["a"]["evictions_caused"] == {"reclaim": 1}
    assert queues["a"]["evictions_suffered"] == {}


def test_pending_reasons_by_count(summary: Summary) -> None:
    assert summary.pending_reasons == [
        {"code": "NoNodeFits", "decisions": 2, "pods": 2},
        {"code": "QueueOverLimit", "decisions": 1, "pods": 1},
    ]


def test_fair_share_over_time_and_jain_index(summary: Summary) -> None:
    queues = {q["queue"]: q for q in summary.queues}
    # a: 4 for 40 s then 6 for 160 s; b: 4 then 2
    assert queues["a"]["avg_fair_share_gpus"] == pytest.approx(5.6)
    assert queues["b"]["avg_fair_share_gpus"] == pytest.approx(2.4)
    assert queues["a"]["avg_deserved_gpus"] == pytest.approx(4.0)
    x = [3.0 / 5.6, 1.4 / 2.4]
    assert summary.cluster["jain_fairness"] == pytest.approx(sum(x) ** 2 / (2 * sum(v * v for v in x)))


def test_series_sample_the_step_functions(summary: Summary) -> None:
    cluster = summary.series["cluster"]
    assert cluster.height == 50
    at = dict(zip(cluster["t"].to_list(), cluster["allocated"].to_list(), strict=True))
    assert at[0.0] == 0.0
    assert at[200.0] == 0.0
    mid = [v for t, v in at.items() if 60 <= t < 110]
    assert mid and all(v == 6000 for v in mid)


def test_jain_index_extremes() -> None:
    assert jain_index([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([]) is None


def test_missing_history_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no history segments"):
        summarize(tmp_path)


def test_segments_without_typed_columns_give_the_same_summary(summary: Summary, tmp_path: Path) -> None:
    write_history(tmp_path)
    for path in tmp_path.glob("**/*.parquet"):
        pl.read_parquet(path).drop(HISTORY_V2_COLUMNS).write_parquet(path)
    assert "phase" not in pl.read_parquet_schema(next(tmp_path.glob("**/*.parquet")))
    assert summarize(tmp_path, bins=50).to_json() == summary.to_json()


@pytest.mark.parametrize("results", ["copy", "only"])
def test_outcomes_on_bind_results_count_once(summary: Summary, tmp_path: Path, results: str) -> None:
    write_history(tmp_path, results=results)
    assert (tmp_path / "bind-results").is_dir()
    got, want = summarize(tmp_path, bins=50).to_json(), summary.to_json()
    assert got["cluster"]["events"] >= want["cluster"]["events"]
    got["cluster"] = {k: v for k, v in got["cluster"].items() if k != "events"}
    want["cluster"] = {k: v for k, v in want["cluster"].items() if k != "events"}
    assert got == want


@pytest.mark.parametrize("column", ["uid", "job"])
def test_texts_sharing_a_key_are_summarized_by_the_texts(
    summary: Summary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, column: str
) -> None:
    hashed_key = Keys.key
    used: set[bool] = set()

    def one_key_for(self: Keys, name: str) -> pl.Expr:
        used.add(self.hashed)
        if self.hashed and name == column:
            return pl.when(pl.col(name).is_not_null()).then(pl.lit(1, pl.UInt64))
        return hashed_key(self, name)

    monkeypatch.setattr(Keys, "key", one_key_for)
    write_history(tmp_path)
    assert summarize(tmp_path, bins=50).to_json() == summary.to_json()
    assert used == {True, False}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-1e17, max_value=1e17, allow_nan=False), min_size=2, max_size=40), st.randoms())
def test_averages_do_not_depend_on_row_order(values: list[float], rnd: random.Random) -> None:
    shuffled = list(values)
    rnd.shuffle(shuffled)
    assert _quantiles(pl.Series(values))["avg"] == _quantiles(pl.Series(shuffled))["avg"]
    frame = pl.DataFrame({"queue": ["q"] * len(values), "v": values})
    again = pl.DataFrame({"queue": ["q"] * len(shuffled), "v": shuffled})
    assert _queue_quantiles(frame, "v").collect().equals(_queue_quantiles(again, "v").collect())
