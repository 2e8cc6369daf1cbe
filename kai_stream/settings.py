"""Connection settings for Kafka (embedded Tansu or any real cluster), read from the environment.

Every field can be set through ``KAI_STREAM_KAFKA_<FIELD>`` (e.g. ``KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS``).
"""

from __future__ import annotations

import ssl
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"]


class KafkaSettings(BaseSettings):
    """Where Kafka is and how to authenticate; the defaults suit the local embedded broker."""

    model_config = SettingsConfigDict(env_prefix="KAI_STREAM_KAFKA_", frozen=True, extra="forbid")

    bootstrap_servers: str = "127.0.0.1:9092"
    engine: Literal["auto", "tansu", "kafka"] = "auto"
    """Which broker this is, so the Tansu workarounds run only on Tansu; ``auto`` asks the broker
    (``kai_stream/quirks.py``)."""
    client_id: str = "kai-stream"
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: str | None = Field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 1000
    request_timeout_ms: int = 30000
    fetch_max_wait_ms: int = Field(default=10, ge=0)
    """How long a consumer's fetch may wait for data. Tansu answers a waiting fetch only when this wait
    expires (never early when records arrive), so it bounds each consumer hop's latency; aiokafka's 500 ms
    default cost the binder 0.3-1 s per decision. On real Kafka a larger value (e.g. 100) saves requests."""
    fetch_max_wait_kafka_ms: int = Field(default=500, ge=0)
    """A long-lived consumer's fetch wait on Apache Kafka, which answers a fetch as soon as records arrive: the
    wait costs no latency there, it only sets how often an idle consumer asks (at 10 ms an idle pipeline kept
    the broker JVM busy: README, Benchmarks). Short reads to a partition's end keep a short wait: their
    first fetch of a partition with nothing new is answered only when the wait runs out."""
    fetch_max_wait_limit_ms: int = Field(default=2000, ge=0)
    """The most a consumer's fetch wait may grow to while Tansu answers its fetches empty behind the log end
    (``kai_stream/fetchwait.py``); it falls back to ``fetch_max_wait_ms`` once the consumer has caught up."""
    feedback_linger_ms: int = Field(default=25, ge=0)
    """How long the connector's and the binder's producers hold a record that cannot change a scheduling decision
    (a bound pod's status, a successful bind) to send it in one batch with others; a record that can (a new
    pending pod, a freed node, a failed bind) is sent at once with whatever is held (``internals.expedite``). Fewer
    batches matter on Tansu, whose fetch lists every stored batch of the partition."""
    fetch_hole_patience_s: float = Field(default=30.0, ge=0)
    """How long a consumer waits for a missing offset that a fetch answer skipped before it goes on past it
    (``kai_stream/fetchgaps.py``: Tansu can answer with a later batch before an earlier one is stored; on a
    non-compacted topic the hole fills within milliseconds)."""

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context when the protocol uses SSL, else None."""
        if self.security_protocol not in ("SSL", "SASL_SSL"):
            return None
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    def client_kwargs(self) -> dict[str, object]:
        """Keyword arguments shared by aiokafka producers, consumers and admin clients."""
        kwargs: dict[str, object] = {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
            "request_timeout_ms": self.request_timeout_ms,
        }
        context = self.ssl_context()
        if context is not None:
            kwargs["ssl_context"] = context
        if self.sasl_mechanism is not None:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password
        return kwargs
