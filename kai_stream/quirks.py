"""Which broker engine a client talks to, and so whether the Tansu workarounds apply.

The workarounds exist for Tansu alone: the fetch-wait governor (``fetchwait.py``), the fetch-hole guard
(``fetchgaps.py``), the feedback linger with ``internals.expedite`` (``urgency.py``) and the faust changelog ends read
from fetches (``streams/app.py``). On Apache Kafka none of them runs.

``KafkaSettings.engine`` names the engine (``KAI_STREAM_KAFKA_ENGINE=kafka|tansu``); ``auto`` (the default) asks
the broker for its API versions once per bootstrap address: Apache Kafka has listed OffsetForLeaderEpoch (23) and
WriteTxnMarkers (27) since 0.11, Tansu 0.6.0 lists neither (tests/broker/test_quirks.py checks both engines).
When no broker answers, the workarounds apply (they are correct on any broker, only slower) and a warning says so.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading

from kai_stream.settings import KafkaSettings

log = logging.getLogger(__name__)

_KAFKA_ONLY_APIS = frozenset({23, 27})
_API_VERSIONS = 18
_CORRELATION = 0x6B61
_detected: dict[str, str] = {}
_lock = threading.Lock()


def _api_keys(host: str, port: int, settings: KafkaSettings, timeout_s: float) -> set[int]:
    """The API keys an ApiVersions v0 request is answered with (allowed before any SASL handshake)."""
    client_id = b"kai-stream-probe"
    body = struct.pack(">hhih", _API_VERSIONS, 0, _CORRELATION, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout_s) as raw:
        context = settings.ssl_context()
        sock = context.wrap_socket(raw, server_hostname=host) if context is not None else raw
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        data = _recv(sock, size)
    correlation, error, count = struct.unpack(">ihi", data[:10])
    if correlation != _CORRELATION or error != 0:
        raise OSError(f"unexpected ApiVersions answer (correlation {correlation}, error {error})")
    return {struct.unpack(">h", data[10 + 6 * i : 12 + 6 * i])[0] for i in range(count)}


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


def detect_engine(settings: KafkaSettings, timeout_s: float = 2.0) -> str | None:
    """``kafka`` or ``tansu`` from the first bootstrap server that answers; None when none does."""
    for server in settings.bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            keys = _api_keys(host.strip("[]"), int(port), settings, timeout_s)
        except (OSError, ValueError) as exc:
            log.debug("engine probe of %s failed: %s", server, exc)
            continue
        return "kafka" if keys >= _KAFKA_ONLY_APIS else "tansu"
    return None


def broker_engine(settings: KafkaSettings) -> str:
    """The configured engine, else the detected one (cached per bootstrap address), else ``tansu``."""
    if settings.engine != "auto":
        return settings.engine
    with _lock:
        known = _detected.get(settings.bootstrap_servers)
        if known is not None:
            return known
        found = detect_engine(settings)
        if found is None:
            log.warning(
                "could not ask %s which broker it is: applying the Tansu workarounds (set KAI_STREAM_KAFKA_ENGINE)",
                settings.bootstrap_servers,
            )
            return "tansu"
        _detected[settings.bootstrap_servers] = found
        return found


def tansu_workarounds(settings: KafkaSettings) -> bool:
    """True when the broker is Tansu (or unknown): fetch governor, hole guard, feedback linger apply."""
    return broker_engine(settings) == "tansu"


def feedback_linger_ms(settings: KafkaSettings) -> int:
    """How long producers hold feedback records: ``settings.feedback_linger_ms`` on Tansu, 0 on Apache Kafka."""
    return settings.feedback_linger_ms if tansu_workarounds(settings) else 0
