"""DRA allocation through the whole pipeline on the simulated cluster (broker, connector, processor, binder): the
two-GPU pod of ``examples/dra.yaml`` is bound to node-dra and the claim made from its template holds exactly the
devices its BindRequested carries, reserved for it; no bind failed."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from kai_stream.core.events import BindFailed, BindRequested
from kai_stream.pipeline import Pipeline, PipelineOptions

ROOT = Path(__file__).resolve().parents[2]


async def test_the_pipeline_allocates_the_claims_of_the_pods_it_binds(broker: str) -> None:
    options = PipelineOptions(
        scenario=ROOT / "examples" / "dra.yaml", bootstrap_servers=broker,
        topic_prefix=f"dra{uuid.uuid4().hex[:8]}-", tick_interval_s=0.2,
    )
    pipeline = Pipeline(options)
    async with pipeline:
        assert pipeline.tail is not None
        deadline = time.monotonic() + 90
        while not (pipeline.cluster.get("pods", "demo", "a-two")["spec"].get("nodeName")
                   and len(pipeline.cluster.objects("ResourceClaim", "demo")) == 4):  # three named, one made
            assert pipeline.failed() is None, pipeline.failed()
            assert time.monotonic() < deadline, "a-two was never bound with its claim made"
            await asyncio.sleep(0.1)
        await pipeline.wait_caught_up(timeout_s=60)
        decisions = pipeline.tail.all_decisions()
        events = [e for part in sorted(pipeline.tail.events) for _, e in pipeline.tail.events[part]]
        pod = pipeline.cluster.get("pods", "demo", "a-two")
        claims = {c["metadata"]["name"]: c for c in pipeline.cluster.objects("ResourceClaim", "demo")}

    [bind] = [d for d in decisions if isinstance(d, BindRequested) and d.name == "a-two"]
    assert not [e for e in events if isinstance(e, BindFailed)]
    assert pod["spec"]["nodeName"] == bind.node == "node-dra"
    [made] = pod["status"]["resourceClaimStatuses"]
    claim = claims[made["resourceClaimName"]]
    found = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in found] == [(d.pool, d.device) for d in bind.dra_devices]
    assert sorted(r["device"] for r in found) == ["gpu-0", "gpu-1"]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "a-two", "uid": pod["metadata"]["uid"]}]
    assert "allocation" not in claims["one-gpu"].get("status", {}), "the pending pod's claim was allocated"
