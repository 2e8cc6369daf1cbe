"""Analytics over the Parquet history (polars lazy scans): summary figures, tables and the HTML report."""

from kai_stream.analytics.summary import Summary, jain_index, summarize

__all__ = ["Summary", "jain_index", "summarize"]
