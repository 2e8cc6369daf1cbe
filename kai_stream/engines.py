"""The embedded broker engines behind one interface: Tansu (``kai_stream/broker.py``) and Apache Kafka
(``kai_stream/kafka_engine.py``), chosen by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol

from kai_stream.broker import DEFAULT_DATA_DIR, EmbeddedBroker
from kai_stream.kafka_engine import KafkaBroker
from kai_stream.settings import KafkaSettings

Engine = Literal["tansu", "kafka"]
ENGINES: tuple[Engine, ...] = ("tansu", "kafka")


class Broker(Protocol):
    """What callers need of an embedded broker."""

    @property
    def bootstrap_servers(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def running(self) -> bool: ...

    def start(self) -> str: ...

    def stop(self) -> None: ...

    def output_tail(self) -> str: ...

    def client_settings(self, **overrides: Any) -> KafkaSettings: ...


TANSU_INSECURE = (
    "the tansu engine (Tansu 0.6.0) cannot do SASL or TLS: it speaks PLAINTEXT only (with memory storage no SCRAM "
    "user can be created); use --engine kafka for a SASL_SSL broker, or a Kafka of your own"
)


def embedded_broker(
    engine: Engine = "tansu",
    *,
    memory: bool = True,
    port: int | None = None,
    data_dir: Path | str = DEFAULT_DATA_DIR,
    unsafe_durable: bool = False,
    secure: bool = False,
) -> Broker:
    """An unstarted embedded broker of ``engine``. Apache Kafka's log is durable as it is; Tansu's durable (s3)
    storage loses acknowledged writes and is refused unless ``unsafe_durable`` (``broker.UNSAFE_DURABLE``).
    ``secure``: a SASL_SSL client listener (Apache Kafka only; ``ValueError`` naming why on Tansu)."""
    if engine == "kafka":
        return KafkaBroker(memory=memory, port=port, data_dir=data_dir, secure=secure)
    if secure:
        raise ValueError(TANSU_INSECURE)
    return EmbeddedBroker(memory=memory, port=port, data_dir=data_dir, unsafe_durable=unsafe_durable)
