"""Faust tables: caches for reporting, never the source of truth (state is rebuilt from cluster-events).

``fair_share``: ``"<pool>/<queue>"`` -> ``{"gpu": devices, "cpu": millicores, "memory": MB}``, refreshed on a
Tick of the pool when the pool changed since, at most every ``fair_share_interval_s`` (settings.py). Registered
only with ``fair_share_table`` (off by default): a registered table makes every rebalance wait for its changelog
recovery before any record is processed, and on Tansu that recovery can stall until the next rebalance (what was
seen: benchmarks/README.md). Nothing in kai-stream reads the table; the processor's queue gauges
(``queue_metrics.py``) report the same fair shares.
"""

from __future__ import annotations

from typing import Any

from kai_stream.streams.app import app, settings

fair_share: Any = (
    app.Table(
        "fair-share",
        default=dict,
        key_type=str,
        use_partitioner=True,
        help="fair share per pool/queue (cache)",
    )
    if settings.fair_share_table
    else None
)
