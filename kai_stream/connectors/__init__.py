"""Edges that bring the outside world in: the Kubernetes connector, the NVML agent, and the simulated cluster."""
