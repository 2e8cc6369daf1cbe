"""A supervised connector's catalog handed to its successor: the catalog as rebuilt from the log up to some
offsets, kept in the supervisor's directory (``prefork.state_dir``), so the next worker reads only the log after
those offsets instead of the whole topic (whose length grows with the run, not with the cluster).

The catalog is a fold of the log in offset order in which each key keeps its last event, so folding again records
at or after the saved offsets gives what folding the whole log gives. Saved once per worker, just after its
catalog was read (a copy of that state, before anything it publishes), digests computed in the background; a
worker killed before it saved leaves its predecessor's file, which is still a fold up to its own offsets. Nothing
outside a supervised worker.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import orjson

from kai_stream import prefork
from kai_stream.connectors.kubernetes.catalog import Catalog, Published

log = logging.getLogger(__name__)


def _path(topic: str) -> Path | None:
    if prefork.state_dir is None:
        return None
    return Path(prefork.state_dir) / f"catalog-{topic.replace('/', '_')}.json"


def load(topic: str) -> tuple[Catalog, dict[int, int]] | None:
    """The catalog a predecessor saved and the offset per partition it is a fold of the log up to; None if none."""
    path = _path(topic)
    if path is None or not path.exists():
        return None
    saved = orjson.loads(path.read_bytes())
    catalog = Catalog(pools=set(saved["pools"]))
    for kind, namespace, name, event_id, pool, uid, version, digest in saved["objects"]:
        catalog.objects[(kind, namespace, name)] = Published(event_id, pool, uid, version, digest=digest)
    return catalog, {int(p): int(offset) for p, offset in saved["positions"].items()}


async def save(topic: str, catalog: Catalog, positions: dict[int, int]) -> None:
    """Write ``catalog`` (a copy nobody changes any more) as the fold of the log up to ``positions``."""
    path = _path(topic)
    if path is None:
        return
    objects = []
    for i, (key, known) in enumerate(sorted(catalog.objects.items())):
        if i % 100 == 99:
            await asyncio.sleep(0)
        objects.append([*key, known.event_id, known.pool, known.uid, known.version, known.content])
    body = {"positions": {str(p): offset for p, offset in positions.items()}, "pools": sorted(catalog.pools),
            "objects": objects}
    partial = path.with_suffix(".partial")
    try:
        partial.write_bytes(orjson.dumps(body))
        os.replace(partial, path)
    except OSError as exc:  # the file only saves the successor time
        log.warning("connector: could not save the catalog for a successor: %r", exc)
