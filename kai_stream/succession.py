"""A supervised worker's successor takes its place in its consumer groups at once: each worker records the member
id it holds in a group (``record``), and the worker forked after it died removes that member from the group
(``fence``: a LeaveGroup on the dead worker's behalf) before joining. Without it, a dynamic member killed with
SIGKILL stays in its group until its session times out, and the group's next rebalance waits for it: the
successor's join took the session timeout plus the broker's join delay (the figures on Tansu:
benchmarks/README.md, "Recovery after a kill").

Only under ``prefork.supervise`` (the records live in the supervisor's directory, ``prefork.state_dir``), and only
for dynamic members: a static member (``group.instance.id``, the processor on Apache Kafka) is replaced by its
successor's join anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from pathlib import Path

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.protocol.group import LeaveGroupRequest

from kai_stream import prefork
from kai_stream.settings import KafkaSettings

log = logging.getLogger(__name__)


def _path(group: str) -> Path | None:
    if prefork.state_dir is None:
        return None
    return Path(prefork.state_dir) / f"member-{group.replace('/', '_')}"


def record(group: str, member_id: str) -> None:
    """Remember that this worker is ``member_id`` in ``group`` (nothing outside a supervised worker)."""
    path = _path(group)
    if path is not None and member_id:
        path.write_text(member_id)


async def fence(settings: KafkaSettings, group: str, timeout_s: float = 5.0) -> str | None:
    """Remove the member a dead predecessor held in ``group`` (LeaveGroup on its behalf); its member id, or None
    when there was none. A failure is logged and ignored: the group then waits for the session timeout."""
    path = _path(group)
    if path is None or not path.exists():
        return None
    member_id = path.read_text()
    path.unlink()
    kwargs = settings.client_kwargs()
    client = AIOKafkaClient(**kwargs)
    try:
        async with asyncio.timeout(timeout_s):
            await client.bootstrap()
            node = await client.coordinator_lookup(CoordinationType.GROUP, group)
            response = await client.send(node, LeaveGroupRequest(group, member_id))
        log.info("removed dead predecessor %s from group %s: %s", member_id, group, response)
    except Exception as exc:  # the fence only saves time
        log.warning("could not remove dead predecessor %s from group %s: %r", member_id, group, exc)
    finally:
        with contextlib.suppress(Exception):
            await client.close()
    return member_id


def fence_now(settings: KafkaSettings, group: str) -> str | None:
    """``fence`` from synchronous code, on a thread of its own (no event loop of the caller's is touched)."""
    path = _path(group)
    if path is None or not path.exists():
        return None
    found: list[str | None] = [None]

    def run() -> None:
        found[0] = asyncio.run(fence(settings, group))

    thread = threading.Thread(target=run, name="fence")
    thread.start()
    thread.join()
    return found[0]
