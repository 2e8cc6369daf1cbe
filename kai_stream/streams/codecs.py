"""The one faust codec for kai-stream records (registered once, as ``kai-stream``).

Encoding is ``events.dumps`` (canonical orjson of the pydantic model, keys sorted) so bytes on a topic are
the same whoever publishes them. Decoding cluster-events is explicit (``decode_cluster_event``) rather than
inside faust's deserializer, so that a malformed record reaches the agent and is dead-lettered with its
reason instead of being dropped by the stream.
"""

from __future__ import annotations

from typing import Any

import orjson
from faust.serializers import codecs

from kai_stream.core.events import ClusterEvent, Model, dumps, loads_cluster_event

CODEC = "kai-stream"


class EventCodec(codecs.Codec):
    """pydantic model -> canonical bytes; bytes -> plain JSON (typed decoding is the reader's job)."""

    def _dumps(self, obj: Any) -> bytes:
        if isinstance(obj, Model):
            return dumps(obj)
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)

    def _loads(self, s: bytes) -> Any:
        return orjson.loads(s)


def decode_cluster_event(raw: bytes | None) -> ClusterEvent:
    """Decode one cluster-events record; raises ``MalformedEvent`` saying why."""
    return loads_cluster_event(raw if raw is not None else b"")


if CODEC not in codecs.codecs:
    codecs.register(CODEC, EventCodec())
