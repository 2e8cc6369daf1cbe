"""Processor settings (``KAI_STREAM_PROCESSOR_<FIELD>``), next to ``KafkaSettings`` for the connection."""

from __future__ import annotations

from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict


class ProcessorSettings(BaseSettings):
    """How the scheduler processor is named, batched and tuned.

    ``app_id`` is the faust app id and Kafka consumer group; ``topic_prefix`` isolates a deployment (or a
    test) on a shared broker; ``config_path`` is a scheduler config YAML (defaults when unset).
    ``max_cycle_delay_s``: while more records are known to be waiting, a cycle waits for them as long as the
    previous cycle took, never longer than this (a cheap cycle is barely delayed; a backlog that makes cycles
    expensive is decided in fewer, larger batches).
    ``fair_share_table``: keep a faust table of fair shares (``tables.py``; off: its changelog recovery delays
    every rebalance). ``fair_share_interval_s``: with it, fair shares (a full session) are recomputed on a Tick at
    most this often, and only when the pool changed since. ``gc_freeze_interval_s``: how often the long-lived
    state is frozen out of the garbage collector's scans.
    ``cycle_on``: ``batch`` (default) runs a cycle for every pool a consumed batch touched with a record other than
    feedback (``urgency.is_feedback``); ``tick`` only for
    the pools a Tick touched, everything else is folded and waits for the next Tick. ``tick`` is for runs driven
    in rounds from outside (``simulate --live`` publishes a round-barrier Tick once the log holds the cluster's
    whole reaction), so where a cycle lands never depends on how the broker split the log into fetches.
    ``fetch_max_wait_ms``: Tansu answers a fetch only when its wait expires, so a short wait is the
    latency floor of every hop (faust hard-codes 1500 ms; the app overrides it).
    ``snapshot_interval_s``: how often (at most) a partition's engine is written to the processor's state topic,
    where a restart resumes from (0: never; a restart then folds both logs from the beginning); on Apache Kafka
    in its transactions, on Tansu after a batch's decisions are acknowledged (``acked_snapshots.py``).
    ``transaction_timeout_ms``: how long the broker keeps a killed processor's open transaction
    (and so what its partition's readers see) before aborting it, when no successor fences it sooner; a batch
    fenced for outlasting it raises it for the processor's later transactions (``exactly_once.py``).
    ``instance_id``: on Apache Kafka, the processor's static membership of its group (``group.instance.id``): a
    processor restarted with the same id takes its partitions back at once instead of after the session timeout
    of the instance it replaces. Unset: a dynamic member. Two running processors must not share one.
    ``supervise``: run the worker under ``kai_stream/prefork.py``: a worker that dies is forked again at once from
    a process that has imported everything, instead of starting a new interpreter.
    ``metrics_interval_s``: a pool's queue gauges (fair share, allocation) are set by at most one cycle this often.
    ``parent_pid``: when set, the processor stops itself (SIGTERM, a clean shutdown) once its parent process is
    gone, so a pipeline killed without its own shutdown (``timeout``, SIGKILL) leaves no processor behind.
    """

    model_config = SettingsConfigDict(env_prefix="KAI_STREAM_PROCESSOR_", frozen=True, extra="forbid")

    app_id: str = "kai-stream-scheduler"
    topic_prefix: str = ""
    config_path: str | None = None
    batch_max: int = 20_000
    """Most records one batch takes: a backlog up to this many (one fetch's 16 MiB holds ~23,000 pending pods'
    records) is folded and decided in one cycle. A backlog just past it leaves a remainder that takes a cycle of
    its own, over the whole pool."""
    batch_within_s: float = 0.005
    max_cycle_delay_s: float = 1.0
    fetch_max_wait_ms: int = 5
    commit_interval_s: float = 0.5
    data_dir: str = ".kai-stream/faust"
    fair_share_table: bool = False
    fair_share_interval_s: float = 10.0
    gc_freeze_interval_s: float = 10.0
    log_level: str = "WARNING"
    cycle_on: Literal["batch", "tick"] = "batch"
    parent_pid: int | None = None
    metrics_interval_s: float = 1.0
    snapshot_interval_s: float = 30.0
    transaction_timeout_ms: int = 10_000
    instance_id: str | None = None
    supervise: bool = False
