"""kai-stream: an event-sourced, streaming GPU scheduler for Kubernetes (KAI Scheduler compatible)."""

__version__ = "0.1.0"
