"""Faust tables: caches for reporting, never the source of truth (state is rebuilt from cluster-events).

``fair_share``: ``"<pool>/<queue>"`` -> ``{"gpu": devices, "cpu": millicores, "memory": MB}``, refreshed on a
Tick of the pool when the pool changed since, at most every ``fair_share_interval_s`` (settings.py).
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
