"""Faust tables: caches for reporting, never the source of truth (state is rebuilt from cluster-events).

``fair_share``: ``"<pool>/<queue>"`` -> ``{"gpu": devices, "cpu": millicores, "memory": MB}``, refreshed on
every Tick cycle of the pool.
"""

from __future__ import annotations

from kai_stream.streams.app import app

fair_share = app.Table(
    "fair-share",
    default=dict,
    key_type=str,
    use_partitioner=True,
    help="fair share per pool/queue (cache)",
)
