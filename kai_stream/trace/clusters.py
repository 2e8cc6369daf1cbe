"""Cluster files for traces: a scenario YAML (Nodes, Queues) -> observed events; auto queues; openb nodes.

``cluster_events`` reads the scenario with the core's manifest loader, so a cluster file is exactly what a
user would ``kubectl apply``. With ``auto_queues`` and no Queue in the file, one leaf queue per team is
added with an equal GPU quota (total GPUs / teams, rounded down to milli-devices) and weight 1.
``openb_nodes_yaml`` converts the Alibaba openb node list (sn, cpu_milli, memory_mib, gpu, model) into Node
manifests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import yaml

from kai_stream.core.events import (
    ALL_POOLS,
    NodeObserved,
    ObservedEvent,
    PodGroupObserved,
    PodObserved,
    QueueObserved,
    QueueResource,
    QueueResources,
    QueueSpec,
    stable_id,
)
from kai_stream.core.manifests import load_scenario
from kai_stream.trace.loaders import TraceError

__all__ = ["auto_queue_events", "cluster_events", "nodes_yaml", "openb_nodes_yaml", "queue_yaml"]

GPU_MEMORY_MIB = {"P100": 16384, "T4": 15360, "V100M16": 16384, "V100M32": 32768, "A10": 24576}


def cluster_events(path: str | Path) -> list[ObservedEvent]:
    """Nodes, Queues (and anything else) of a cluster file, as observed events at time 0."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise TraceError(f"{file}: cannot read cluster file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{file}: not a text file (UTF-8 YAML expected)") from None
    try:
        events = load_scenario(text)
    except ValueError as exc:
        raise TraceError(f"{file}: {exc}") from None
    if not any(isinstance(e, NodeObserved) for e in events):
        raise TraceError(f"{file}: no Node in the cluster file")
    workload = [e for e in events if isinstance(e, PodObserved | PodGroupObserved)]
    if workload:
        first = workload[0]
        kind, what = ("Pod", first.pod) if isinstance(first, PodObserved) else ("PodGroup", first.pod_group)
        raise TraceError(
            f"{file}: a cluster file holds Nodes and Queues (the trace brings the workload); found "
            f"{len(workload)} Pod/PodGroup document(s), first {kind} {what.namespace}/{what.name}"
        )
    return list(events)


def auto_queue_events(events: list[ObservedEvent], teams: list[str]) -> list[ObservedEvent]:
    """One queue per team with an equal share of the cluster's GPUs as quota (when the file has no Queue)."""
    if any(isinstance(e, QueueObserved) for e in events) or not teams:
        return []
    total = sum(e.node.allocatable.gpu_milli for e in events if isinstance(e, NodeObserved))
    quota = total // len(teams)
    unlimited = QueueResource(quota=-1, over_quota_weight=1, limit=-1)
    return [
        QueueObserved(
            event_id=stable_id("auto-queue", team),
            ts=0.0,
            pool=ALL_POOLS,
            queue=QueueSpec(
                name=team,
                uid=stable_id("Queue", team),
                resources=QueueResources(
                    gpu=QueueResource(quota=quota, over_quota_weight=1, limit=-1), cpu=unlimited, memory=unlimited
                ),
                created=float(i),
            ),
        )
        for i, team in enumerate(teams)
    ]


def _node_doc(name: str, gpus: int, cpu: str, memory: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def queue_yaml(name: str, gpu_quota: float, weight: int = 1, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpu_quota, "overQuotaWeight": weight, "limit": -1},
            "cpu": {"quota": -1, "overQuotaWeight": weight, "limit": -1},
            "memory": {"quota": -1, "overQuotaWeight": weight, "limit": -1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def nodes_yaml(
    count: int, gpus: int, cpu: str, memory: str, prefix: str = "node", model: str = "A100"
) -> list[dict[str, Any]]:
    """``count`` identical GPU nodes, with a rack label every 8 nodes."""
    width = max(2, len(str(count - 1)))
    return [
        _node_doc(
            f"{prefix}-{i:0{width}d}",
            gpus,
            cpu,
            memory,
            {"nvidia.com/gpu.product": model, "topology.kubernetes.io/rack": f"rack-{i // 8}"},
        )
        for i in range(count)
    ]


def openb_nodes_yaml(node_list: str | Path) -> str:
    """The Alibaba openb node list as multi-document Node YAML (GPU model and memory as labels)."""
    file = Path(node_list)
    frame = pl.read_csv(file)
    for column in ("sn", "cpu_milli", "memory_mib", "gpu", "model"):
        if column not in frame.columns:
            raise TraceError(f"{file}: column {column!r} not found; columns are: {', '.join(frame.columns)}")
    docs = []
    for sn, cpu, memory, gpus, model in frame.select("sn", "cpu_milli", "memory_mib", "gpu", "model").iter_rows():
        labels = {"nvidia.com/gpu.product": str(model)}
        if model in GPU_MEMORY_MIB:
            labels["nvidia.com/gpu.memory"] = str(GPU_MEMORY_MIB[model])
        docs.append(_node_doc(str(sn), int(gpus), f"{int(cpu)}m", f"{int(memory)}Mi", labels))
    return yaml.safe_dump_all(docs, sort_keys=False)
