"""KAI's test builders' defaults (``pkg/scheduler/test_utils``), shared by the two ported-test harnesses
(``kai_ported/kai_harness.py`` and ``kai_ported_allocate/kai_topology.py``)."""

from __future__ import annotations

NODE_CPU_CORES = 20_000
"""A node's CPU unless ``CPUMillis`` says otherwise (read as cores)."""
NODE_MEMORY = 20 * 10**9
"""A node's memory in bytes unless ``CPUMemory`` says otherwise."""
NODE_GPU_MEMORY_MIB = 100
"""A node's GPU memory per device unless ``GPUMemory`` says otherwise."""
POD_CPU_CORES = 1
"""A task's CPU unless ``RequiredCPUsPerTask`` says otherwise."""
POD_MEMORY = 10**9
"""A task's memory in bytes unless ``RequiredMemoryPerTask`` says otherwise."""
DEFAULT_DEPARTMENT = "default"
"""The department every queue goes under when the test names none (unlimited quota)."""
