"""Scheduler plugins: each registers hooks on a session when it opens (registry in framework.plugins)."""
