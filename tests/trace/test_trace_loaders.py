"""Trace loaders: ITP, Alibaba openb, generic CSV (ISO dates, unsorted rows, column mapping), clear errors."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from kai_stream.trace.clusters import auto_queue_events, cluster_events, openb_nodes_yaml
from kai_stream.trace.loaders import TraceError, load_trace, parse_columns, parse_window

DATA = Path(__file__).parent / "data"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_itp_rows_are_sorted_and_hashed_into_teams(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "itp.csv",
        "job_id,submission_time,duration,num_gpu\nb,20,100,16\na,10,50,1\nc,10,5,2\n",
    )
    trace = load_trace(path, "itp", teams=3)
    assert trace.jobs["job_id"].to_list() == ["a", "c", "b"]
    assert trace.jobs["submit"].to_list() == [10.0, 10.0, 20.0]
    assert trace.jobs["gpus"].to_list() == [1, 2, 16]
    assert trace.jobs["gpu_milli"].to_list() == [1000, 2000, 8000]
    assert trace.jobs["queue"].to_list() == [f"team-{zlib.crc32(j.encode()) % 3}" for j in ("a", "c", "b")]
    assert any("crc32" in note for note in trace.notes)


def test_window_is_relative_to_the_first_submission(tmp_path: Path) -> None:
    path = _write(tmp_path, "itp.csv", "job_id,submission_time,duration,num_gpu\na,1000,1,1\nb,4600,1,1\nc,8200,1,1\n")
    trace = load_trace(path, "itp", window=parse_window("0:2h"))
    assert trace.jobs["job_id"].to_list() == ["a", "b"]
    with pytest.raises(TraceError, match="--window"):
        parse_window("5h:1h")


def test_generic_with_iso_dates_unsorted_rows_and_mapping(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "jobs.csv",
        "id,start,secs,n,team,share\n"
        "x,2024-01-01T00:10:00Z,60,1,ml,500\n"
        "y,2024-01-01T00:00:00Z,120,4,cv,1000\n"
        "z,2024-01-01 00:05:00,30,16,ml,1000\n",
    )
    columns = parse_columns("submit=start,duration=secs,gpus=n,queue=team,gpu_milli=share,job_id=id")
    trace = load_trace(path, "generic", columns=columns)
    assert trace.jobs["job_id"].to_list() == ["y", "z", "x"]
    submits = trace.jobs["submit"].to_list()
    assert submits[1] - submits[0] == 300.0
    assert submits[2] - submits[0] == 600.0
    assert trace.jobs["queue"].to_list() == ["cv", "ml", "ml"]
    assert trace.jobs["gpu_milli"].to_list() == [4000, 8000, 500]
    assert trace.teams == ["cv", "ml"]


def test_generic_numeric_seconds_and_default_names(tmp_path: Path) -> None:
    path = _write(tmp_path, "jobs.csv", "submit,duration,gpus\n5.5,10,1\n1,20,2\n")
    trace = load_trace(path, "generic")
    assert trace.jobs["submit"].to_list() == [1.0, 5.5]
    assert trace.jobs["job_id"].to_list() == ["job-1", "job-0"]


def test_errors_name_the_bad_column(tmp_path: Path) -> None:
    path = _write(tmp_path, "jobs.csv", "t,d,g\n1,10,1\nsoon,10,1\n")
    with pytest.raises(TraceError, match=r"column 't' \(submit time\): row 3 has 'soon'"):
        load_trace(path, "generic", columns=parse_columns("submit=t,duration=d,gpus=g"))
    with pytest.raises(TraceError, match=r"column 'gpus' \(GPU count\) not found; columns are: t, d, g"):
        load_trace(path, "generic", columns=parse_columns("submit=t,duration=d"))
    with pytest.raises(TraceError, match=r"column 'team' \(queue\) not found"):
        load_trace(path, "generic", columns=parse_columns("submit=t,duration=d,gpus=g,queue=team"))
    bad = _write(tmp_path, "neg.csv", "submit,duration,gpus\n1,-5,1\n")
    with pytest.raises(TraceError, match=r"column 'duration' \(duration\): row 2 has -5, expected >= 0"):
        load_trace(bad, "generic")
    with pytest.raises(TraceError, match="unknown field 'start'"):
        parse_columns("start=t")
    with pytest.raises(TraceError, match="trace file not found"):
        load_trace(tmp_path / "missing.csv", "itp")


def test_alibaba_openb_fractions_and_runtime(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "openb.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p0,12000,16384,1,1000,,LS,Running,0,100,10\n"
        "p1,6000,12288,1,460,,BE,Running,5,50,\n"
        "p2,4000,1024,0,0,,BE,Running,7,9,7\n"
        "p3,4000,1024,2,1000,,LS,Running,8,20,8\n",
    )
    trace = load_trace(path, "alibaba-openb")
    rows = {r["job_id"]: r for r in trace.jobs.to_dicts()}
    assert rows["p0"]["duration"] == 90.0
    assert rows["p1"]["duration"] == 45.0
    assert rows["p1"]["gpu_milli"] == 460
    assert rows["p2"]["gpu_milli"] == 0
    assert rows["p3"]["gpu_milli"] == 2000
    assert rows["p0"]["memory"] == 16384 * 2**20
    assert rows["p1"]["queue"] == "BE"


def test_openb_node_list_converts_to_a_cluster(tmp_path: Path) -> None:
    nodes = _write(
        tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,96000,786432,8,G2\n"
    )
    cluster = _write(tmp_path, "cluster.yaml", openb_nodes_yaml(nodes))
    events = cluster_events(cluster)
    capacity = {e.node.name: e.node.allocatable for e in events}  # type: ignore[union-attr]
    assert capacity["n0"].gpu_milli == 2000
    assert capacity["n0"].cpu_milli == 64000
    assert capacity["n1"].memory == 786432 * 2**20
    queues = auto_queue_events(events, ["a", "b", "c"])
    assert [q.queue.name for q in queues] == ["a", "b", "c"]  # type: ignore[union-attr]
    assert {q.queue.resources.gpu.quota for q in queues} == {10000 // 3}  # type: ignore[union-attr]


def test_real_itp_slice_loads() -> None:
    trace = load_trace(DATA / "itp_cluster07_head80.csv", "itp")
    assert trace.jobs.height == 80
    assert trace.jobs["submit"].is_sorted()
