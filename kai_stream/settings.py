"""Connection settings for Kafka (embedded Tansu or any real cluster), read from the environment.

Every field can be set through ``KAI_STREAM_KAFKA_<FIELD>`` (e.g. ``KAI_STREAM_KAFKA_BOOTSTRAP_SERVERS``). Every
Kafka client kai-stream builds takes its connection and security options from here (``client_kwargs``; the faust
app through ``streams/app.py``), and a component started as a subprocess gets them as ``client_env``. A security
setting that cannot work (SASL without a user, a CA file that is not a PEM certificate, a TLS file with a plaintext
protocol) is refused when the settings are read, naming the field.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"]
ENV_PREFIX = "KAI_STREAM_KAFKA_"
_SASL = ("SASL_PLAINTEXT", "SASL_SSL")
_TLS = ("SSL", "SASL_SSL")
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class KafkaSettings(BaseSettings):
    """Where Kafka is and how to authenticate; the defaults suit the local embedded broker."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid", env_ignore_empty=True)

    bootstrap_servers: str = "127.0.0.1:9092"
    engine: Literal["auto", "tansu", "kafka"] = "auto"
    """Which broker this is, so the Tansu workarounds run only on Tansu; ``auto`` asks the broker
    (``kai_stream/quirks.py``)."""
    client_id: str = "kai-stream"
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = Field(default=None, validate_default=True)
    """Required with a SASL protocol, refused without one."""
    sasl_username: str | None = Field(default=None, validate_default=True)
    sasl_password: SecretStr | None = Field(default=None, validate_default=True)
    """Shown as ``**********`` in reprs and logs; ``client_kwargs``/``client_env`` hand out the value."""
    ssl_cafile: str | None = None
    """PEM CA certificate(s) the broker's certificate must chain to (default: the system's trust store)."""
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

    @field_validator("sasl_mechanism")
    @classmethod
    def _mechanism_fits_protocol(cls, value: str | None, info: ValidationInfo) -> str | None:
        protocol = info.data.get("security_protocol")
        if protocol in _SASL and value is None:
            raise ValueError(f"required with security_protocol {protocol}")
        if protocol is not None and protocol not in _SASL and value is not None:
            raise ValueError(f"set, but security_protocol {protocol} does no SASL (SASL_SSL or SASL_PLAINTEXT does)")
        return value

    @field_validator("sasl_username", "sasl_password")
    @classmethod
    def _credential_present(cls, value: object, info: ValidationInfo) -> object:
        mechanism = info.data.get("sasl_mechanism")
        given = value.get_secret_value() if isinstance(value, SecretStr) else value
        if mechanism in _PASSWORD_MECHANISMS and not given:
            raise ValueError(f"required with sasl_mechanism {mechanism}")
        return value

    @field_validator("ssl_cafile", "ssl_certfile", "ssl_keyfile")
    @classmethod
    def _tls_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        protocol = info.data.get("security_protocol")
        if protocol is not None and protocol not in _TLS:
            raise ValueError(f"set, but security_protocol {protocol} does no TLS (SSL or SASL_SSL does)")
        if not Path(value).is_file():
            raise ValueError(f"no such file: {value}")
        if info.field_name == "ssl_cafile":
            try:
                ssl.create_default_context(cafile=value)
            except ssl.SSLError as exc:
                raise ValueError(f"{value} holds no PEM CA certificate ({exc.reason})") from exc
        return value

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context when the protocol uses SSL, else None."""
        if self.security_protocol not in _TLS:
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
            kwargs["sasl_plain_password"] = self.password()
        return kwargs

    def password(self) -> str | None:
        return None if self.sasl_password is None else self.sasl_password.get_secret_value()

    def client_env(self) -> dict[str, str]:
        """The connection and security settings as ``KAI_STREAM_KAFKA_*`` variables, for a component started as a
        subprocess (the password included: pass it in the child's environment, never on a command line)."""
        values = {
            "bootstrap_servers": self.bootstrap_servers,
            "security_protocol": self.security_protocol,
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_username": self.sasl_username,
            "sasl_password": self.password(),
            "ssl_cafile": self.ssl_cafile,
            "ssl_certfile": self.ssl_certfile,
            "ssl_keyfile": self.ssl_keyfile,
        }
        return {f"{ENV_PREFIX}{key.upper()}": value for key, value in values.items() if value is not None}

    @classmethod
    def for_servers(cls, bootstrap_servers: str | None, **overrides: object) -> KafkaSettings:
        """The settings from the environment, with ``bootstrap_servers`` (a ``--bootstrap-servers`` option) in
        place of the configured address when given."""
        if bootstrap_servers is not None:
            overrides["bootstrap_servers"] = bootstrap_servers
        return cls(**overrides)  # type: ignore[arg-type]
