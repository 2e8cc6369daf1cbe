"""History: every topic archived as Parquet segments, read back for replay, explain and analytics."""
