"""Trace-driven simulation: real job traces replayed in virtual time through the pure scheduler core."""
