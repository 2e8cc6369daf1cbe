"""Tests of the pure scheduler core (manifests, fair share, allocate, simulate)."""
