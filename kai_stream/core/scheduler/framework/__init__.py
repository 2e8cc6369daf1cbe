"""Scheduler framework: session snapshot, hooks, node index, ordering and the statement (undo log)."""
