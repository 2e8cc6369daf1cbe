"""Job traces (CSV) -> one normalized polars frame of jobs; every error names the bad column.

Normalized columns (``JOB_COLUMNS``): ``job_id`` (str), ``submit`` (s, float), ``duration`` (s, float),
``gpus`` (whole devices the job asks for; 1 for a shared-GPU pod), ``gpu_milli`` (per pod: a fraction of one
device for shared pods, else ``min(gpus, 8) * 1000``), ``cpu_milli``, ``memory`` (bytes), ``queue`` (team).

Formats:

* ``itp`` — Microsoft ITP (job_id, submission_time, duration, num_gpu); no team column, so queues are
  ``team-<crc32(job_id) % teams>`` (stable across runs and machines);
* ``alibaba-openb`` — Alibaba PAI openb pod list (creation/scheduled/deletion times, num_gpu, gpu_milli,
  cpu_milli, memory_mib); runtime = deletion - (scheduled or creation); the team is the ``qos`` column;
* ``generic`` — any CSV with a column mapping: submit (seconds or ISO date-time), duration (s), gpus,
  optional queue, gpu_milli, job_id; rows need not be sorted.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import polars as pl

__all__ = [
    "GENERIC_FIELDS",
    "JOB_COLUMNS",
    "Trace",
    "TraceError",
    "load_trace",
    "parse_columns",
    "parse_window",
]

TraceFormat = Literal["itp", "alibaba-openb", "generic"]
JOB_COLUMNS = ("job_id", "submit", "duration", "gpus", "gpu_milli", "cpu_milli", "memory", "queue")
GENERIC_FIELDS = ("submit", "duration", "gpus", "queue", "gpu_milli", "job_id", "cpu_milli", "memory_mib")
MIB = 2**20
GPUS_PER_POD = 8


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and the column."""


@dataclass
class Trace:
    """Jobs sorted by (submit, job_id), plus notes for the summary (how queues were assigned …)."""

    jobs: pl.DataFrame
    source: str
    format: str
    notes: list[str] = field(default_factory=list)

    @property
    def teams(self) -> list[str]:
        return sorted(self.jobs["queue"].unique().to_list())


def parse_columns(text: str | None) -> dict[str, str]:
    """``submit=t,duration=d`` -> {"submit": "t", "duration": "d"}; unknown fields are an error."""
    if not text:
        return {}
    mapping: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, column = part.partition("=")
        key, column = key.strip(), column.strip()
        if not sep or not column:
            raise TraceError(f"--columns: expected FIELD=COLUMN, got {part!r}")
        if key not in GENERIC_FIELDS:
            raise TraceError(f"--columns: unknown field {key!r}; known: {', '.join(GENERIC_FIELDS)}")
        mapping[key] = column
    return mapping


def _seconds(text: str) -> float:
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    text = text.strip()
    if text and text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``START:END`` relative to the first submission, in seconds or with a unit (``0:600h``, ``2d:5d``)."""
    if not text:
        return None
    start, sep, end = text.partition(":")
    try:
        lo = _seconds(start) if start.strip() else 0.0
        hi = _seconds(end) if end.strip() else float("inf")
    except ValueError:
        raise TraceError(f"--window: expected START:END in seconds (or with s/m/h/d), got {text!r}") from None
    if not sep or hi <= lo:
        raise TraceError(f"--window: expected START:END with END > START, got {text!r}")
    return lo, hi


def _read_csv(path: Path) -> pl.DataFrame:
    try:
        return pl.read_csv(path, infer_schema_length=10000)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise TraceError(f"{path}: cannot read CSV: {exc}") from None


def _require(frame: pl.DataFrame, path: Path, column: str, role: str) -> None:
    if column not in frame.columns:
        raise TraceError(f"{path}: column {column!r} ({role}) not found; columns are: {', '.join(frame.columns)}")


def _bad_row(frame: pl.DataFrame, parsed: pl.Series, column: str) -> int | None:
    bad = (parsed.is_null() & frame[column].is_not_null()) | frame[column].is_null()
    if parsed.dtype.is_float():
        bad = bad | parsed.is_nan() | parsed.is_infinite()
    idx = bad.arg_true()
    return int(idx[0]) if len(idx) else None


def _numeric(frame: pl.DataFrame, path: Path, column: str, role: str, *, minimum: float = 0.0) -> pl.Series:
    _require(frame, path, column, role)
    values = frame[column].cast(pl.Float64, strict=False)
    row = _bad_row(frame, values, column)
    if row is not None:
        raise TraceError(
            f"{path}: column {column!r} ({role}): row {row + 2} has {frame[column][row]!r}, expected a number"
        )
    below = (values < minimum).arg_true()
    if len(below):
        row = int(below[0])
        raise TraceError(
            f"{path}: column {column!r} ({role}): row {row + 2} has {frame[column][row]!r}, expected >= {minimum:g}"
        )
    return values


def _submit_seconds(frame: pl.DataFrame, path: Path, column: str) -> pl.Series:
    _require(frame, path, column, "submit time")
    raw = frame[column]
    if raw.dtype.is_numeric():
        return _numeric(frame, path, column, "submit time", minimum=float("-inf"))
    if raw.dtype in (pl.Datetime, pl.Date):
        return raw.cast(pl.Datetime("us")).dt.epoch("us").cast(pl.Float64) / 1e6
    text = raw.cast(pl.Utf8).str.strip_chars()
    numbers = text.cast(pl.Float64, strict=False)
    iso = text.str.replace(r"Z$", "+00:00").str.replace(" ", "T", literal=True)
    attempts = [
        iso.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%:z", strict=False).dt.convert_time_zone("UTC"),
        iso.str.to_datetime("%Y-%m-%dT%H:%M:%S%:z", strict=False).dt.convert_time_zone("UTC"),
        iso.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", strict=False).dt.replace_time_zone("UTC"),
        iso.str.to_datetime("%Y-%m-%dT%H:%M:%S", strict=False).dt.replace_time_zone("UTC"),
        iso.str.to_datetime("%Y-%m-%dT%H:%M", strict=False).dt.replace_time_zone("UTC"),
        iso.str.to_datetime("%Y-%m-%d", strict=False).dt.replace_time_zone("UTC"),
    ]
    seconds = [a.dt.epoch("us").cast(pl.Float64) / 1e6 for a in attempts]
    stamps = seconds[0]
    for other in seconds[1:]:
        stamps = stamps.fill_null(other)
    values = numbers.fill_null(stamps)
    row = _bad_row(frame, values, column)
    if row is not None:
        raise TraceError(
            f"{path}: column {column!r} (submit time): row {row + 2} has {raw[row]!r}, "
            "expected seconds or an ISO date-time"
        )
    return values


def _team_by_hash(ids: pl.Series, teams: int) -> pl.Series:
    return pl.Series("queue", [f"team-{zlib.crc32(i.encode()) % teams}" for i in ids.to_list()], pl.Utf8)


def _finish(frame: pl.DataFrame, path: Path, fmt: str, notes: list[str], window: tuple[float, float] | None) -> Trace:
    jobs = frame.select(JOB_COLUMNS).with_columns(
        pl.col("gpus").cast(pl.Int64),
        pl.col("gpu_milli").cast(pl.Int64),
        pl.col("cpu_milli").cast(pl.Int64),
        pl.col("memory").cast(pl.Int64),
    )
    if jobs.height and window is not None:
        start = float(jobs["submit"].min())  # type: ignore[arg-type]
        lo, hi = window
        jobs = jobs.filter((pl.col("submit") >= start + lo) & (pl.col("submit") < start + hi))
        notes.append(f"window [{lo:g} s, {hi:g} s) after the first submission: {jobs.height} jobs")
    duplicated = jobs["job_id"].is_duplicated()
    if duplicated.any():
        first = jobs["job_id"].filter(duplicated)[0]
        raise TraceError(f"{path}: column job_id: {first!r} appears more than once")
    jobs = jobs.sort(["submit", "job_id"])
    return Trace(jobs=jobs, source=str(path), format=fmt, notes=notes)


def _load_itp(path: Path, teams: int, window: tuple[float, float] | None) -> Trace:
    raw = _read_csv(path)
    _require(raw, path, "job_id", "job id")
    gpus = _numeric(raw, path, "num_gpu", "GPU count")
    frame = pl.DataFrame(
        {
            "job_id": raw["job_id"].cast(pl.Utf8),
            "submit": _submit_seconds(raw, path, "submission_time"),
            "duration": _numeric(raw, path, "duration", "duration"),
            "gpus": gpus,
            "gpu_milli": (gpus.clip(upper_bound=GPUS_PER_POD) * 1000),
            "cpu_milli": pl.Series([0] * raw.height, dtype=pl.Int64),
            "memory": pl.Series([0] * raw.height, dtype=pl.Int64),
            "queue": _team_by_hash(raw["job_id"].cast(pl.Utf8), teams),
        }
    )
    notes = [f"ITP has no team column: queue = team-(crc32(job_id) mod {teams})"]
    return _finish(frame, path, "itp", notes, window)


def _load_alibaba(path: Path, window: tuple[float, float] | None) -> Trace:
    raw = _read_csv(path)
    for column, role in (("name", "pod name"), ("qos", "team")):
        _require(raw, path, column, role)
    created = _numeric(raw, path, "creation_time", "submit time")
    deleted = _numeric(raw, path, "deletion_time", "end time")
    _require(raw, path, "scheduled_time", "start time")
    scheduled = raw["scheduled_time"].cast(pl.Float64, strict=False)
    num_gpu = _numeric(raw, path, "num_gpu", "GPU count")
    gpu_milli = _numeric(raw, path, "gpu_milli", "GPU milli per device")
    cpu = _numeric(raw, path, "cpu_milli", "CPU millicores")
    memory = _numeric(raw, path, "memory_mib", "memory MiB")
    started = scheduled.fill_null(created)
    frame = pl.DataFrame(
        {
            "job_id": raw["name"].cast(pl.Utf8),
            "submit": created,
            "duration": (deleted - started).clip(lower_bound=0.0),
            "gpus": num_gpu,
            "gpu_milli": _alibaba_gpu_milli(num_gpu, gpu_milli),
            "cpu_milli": cpu,
            "memory": memory * MIB,
            "queue": raw["qos"].cast(pl.Utf8).fill_null("default"),
        }
    )
    shared = int(((num_gpu == 1) & (gpu_milli < 1000)).sum())
    notes = [
        "openb: runtime = deletion_time - (scheduled_time or creation_time); queue = qos column",
        f"{shared} pods share a GPU (gpu_milli < 1000); {int((num_gpu == 0).sum())} pods are CPU-only",
    ]
    return _finish(frame, path, "alibaba-openb", notes, window)


def _alibaba_gpu_milli(num_gpu: pl.Series, gpu_milli: pl.Series) -> pl.Series:
    frame = pl.DataFrame({"n": num_gpu, "m": gpu_milli})
    return frame.select(
        pl.when(pl.col("n") == 1)
        .then(pl.col("m").clip(upper_bound=1000))
        .otherwise(pl.col("n").clip(upper_bound=GPUS_PER_POD) * 1000)
        .alias("gpu_milli")
    )["gpu_milli"]


def _load_generic(path: Path, columns: dict[str, str], teams: int, window: tuple[float, float] | None) -> Trace:
    raw = _read_csv(path)
    name = {f: columns.get(f, f) for f in GENERIC_FIELDS}
    gpus = _numeric(raw, path, name["gpus"], "GPU count")
    notes: list[str] = []
    if name["job_id"] in raw.columns:
        ids = raw[name["job_id"]].cast(pl.Utf8)
    else:
        ids = pl.Series([f"job-{i}" for i in range(raw.height)], dtype=pl.Utf8)
        notes.append("no job id column: job-<row number>")
    if "queue" in columns:
        _require(raw, path, name["queue"], "queue")
    if name["queue"] in raw.columns:
        queue = raw[name["queue"]].cast(pl.Utf8).fill_null("default")
    else:
        queue = _team_by_hash(ids, teams)
        notes.append(f"no queue column: queue = team-(crc32(job_id) mod {teams})")
    if name["gpu_milli"] in raw.columns or "gpu_milli" in columns:
        fraction = _numeric(raw, path, name["gpu_milli"], "GPU milli per device")
        gpu_milli = _alibaba_gpu_milli(gpus, fraction)
    else:
        gpu_milli = gpus.clip(upper_bound=GPUS_PER_POD) * 1000
    zeros = pl.Series([0.0] * raw.height, dtype=pl.Float64)
    cpu = _numeric(raw, path, name["cpu_milli"], "CPU millicores") if "cpu_milli" in columns else zeros
    memory = _numeric(raw, path, name["memory_mib"], "memory MiB") * MIB if "memory_mib" in columns else zeros
    frame = pl.DataFrame(
        {
            "job_id": ids,
            "submit": _submit_seconds(raw, path, name["submit"]),
            "duration": _numeric(raw, path, name["duration"], "duration"),
            "gpus": gpus,
            "gpu_milli": gpu_milli,
            "cpu_milli": cpu,
            "memory": memory,
            "queue": queue,
        }
    )
    return _finish(frame, path, "generic", notes, window)


def load_trace(
    path: str | Path,
    fmt: TraceFormat,
    *,
    columns: dict[str, str] | None = None,
    window: tuple[float, float] | None = None,
    teams: int = 4,
) -> Trace:
    """Read a trace file into normalized, sorted jobs; ``TraceError`` names the file and column on bad input."""
    file = Path(path)
    if not file.is_file():
        raise TraceError(f"{file}: trace file not found")
    if fmt == "itp":
        return _load_itp(file, teams, window)
    if fmt == "alibaba-openb":
        return _load_alibaba(file, window)
    if fmt == "generic":
        return _load_generic(file, columns or {}, teams, window)
    raise TraceError(f"unknown trace format {fmt!r}; known: itp, alibaba-openb, generic")
