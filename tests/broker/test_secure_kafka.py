"""SASL_SSL on the embedded Apache Kafka broker (``KafkaBroker(secure=True)``, the session's ``secure_kafka``).

Records go through over SCRAM-SHA-512 and TLS with the settings the broker hands out; a client without TLS/SASL, one
with a wrong password and one that does not trust the broker's CA are refused, and the command line names why and
which setting to check; a security setting that cannot work is refused before any connection, naming the field;
Tansu, which cannot do SASL or TLS, is refused a secure start with the reason. A durable secure broker keeps its
user and CA across a restart, so its clients' settings stay valid.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError
from pydantic import ValidationError

from kai_stream.engines import embedded_broker
from kai_stream.kafka import make_consumer, make_producer, read_to_end, read_topic, start_consumer
from kai_stream.kafka_engine import KafkaBroker
from kai_stream.quirks import detect_engine
from kai_stream.settings import KafkaSettings
from kai_stream.topics import TopicNames, create_topics
from tests.broker.test_cli import PROGRAM
from tests.cli.test_errors import one_line
from tests.cli_main import kai

ENV = "KAI_STREAM_KAFKA_"


def _as(settings: KafkaSettings, **changes: object) -> KafkaSettings:
    values = {**settings.model_dump(), "sasl_password": settings.password(), **changes}
    return KafkaSettings(**values)


def _plaintext(settings: KafkaSettings) -> KafkaSettings:
    return _as(
        settings, security_protocol="PLAINTEXT", sasl_mechanism=None, sasl_username=None, sasl_password=None,
        ssl_cafile=None,
    )


@pytest.mark.kafka
async def test_records_go_through_sasl_ssl_with_the_brokers_settings(secure_kafka: KafkaSettings) -> None:
    assert secure_kafka.security_protocol == "SASL_SSL" and secure_kafka.sasl_mechanism == "SCRAM-SHA-512"
    assert secure_kafka.ssl_cafile is not None and Path(secure_kafka.ssl_cafile).is_file()
    assert "BEGIN CERTIFICATE" in Path(secure_kafka.ssl_cafile).read_text()
    assert detect_engine(secure_kafka) == "kafka"  # ApiVersions over TLS, before SASL
    names = TopicNames.with_prefix(f"sec{uuid.uuid4().hex[:6]}-")
    assert len(await create_topics(secure_kafka, names=names)) == 4
    producer = make_producer(secure_kafka)
    await producer.start()
    try:
        sent = [f"record-{i}".encode() for i in range(20)]
        for value in sent:
            await (await producer.send(names.dead_letter, value, partition=0))
    finally:
        await producer.stop()
    consumer = make_consumer(secure_kafka, names.dead_letter, group_id=f"g-{uuid.uuid4().hex[:6]}")
    await start_consumer(consumer)
    try:
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=200)
        await consumer.seek_to_beginning()
        got = [r.value for r in await read_to_end(consumer)]
    finally:
        await consumer.stop()
    assert got == sent


@pytest.mark.kafka
async def test_plaintext_and_wrong_credentials_are_refused(secure_kafka: KafkaSettings) -> None:
    refused = {
        "plaintext": _plaintext(secure_kafka),
        "wrong password": _as(secure_kafka, sasl_password="not-the-password"),
        "unknown user": _as(secure_kafka, sasl_username="mallory"),
        "TLS without SASL": _as(secure_kafka, security_protocol="SSL", sasl_mechanism=None),
        "untrusted CA": _as(secure_kafka, ssl_cafile=None),
    }
    for what, settings in refused.items():
        producer = make_producer(settings, request_timeout_ms=10_000)
        with pytest.raises(KafkaConnectionError):
            await asyncio.wait_for(producer.start(), 30)
            pytest.fail(f"{what}: connected")
        await producer.stop()


@pytest.mark.kafka
def test_cli_names_why_kafka_refused(
    secure_kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in secure_kafka.client_env().items():
        monkeypatch.setenv(name, value)
    prefix = f"cli{uuid.uuid4().hex[:6]}-"
    code, out, err = kai(["topics", "create", "--prefix", prefix], capsys)
    assert code == 0 and out.count("created") == 4, out + err

    monkeypatch.setenv(f"{ENV}SASL_PASSWORD", "not-the-password")
    code, _, err = kai(["topics", "create", "--prefix", prefix], capsys)
    one_line(code, err, "refused the SASL credentials", f"{ENV}SASL_PASSWORD")
    assert "not-the-password" not in err

    for name in ("SECURITY_PROTOCOL", "SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD", "SSL_CAFILE"):
        monkeypatch.delenv(f"{ENV}{name}")
    code, _, err = kai(["topics", "create", "--prefix", prefix], capsys)
    one_line(code, err, "closed the connection", f"{ENV}SECURITY_PROTOCOL is PLAINTEXT")


def test_security_settings_that_cannot_work_name_the_field(tmp_path: Path) -> None:
    not_pem = tmp_path / "ca.crt"
    not_pem.write_text("not a certificate\n")
    cases: dict[str, dict[str, object]] = {
        "sasl_mechanism": {"security_protocol": "SASL_SSL"},
        "sasl_username": {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_password": "p"},
        "sasl_password": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "u"},
        "ssl_cafile": {"security_protocol": "SSL", "ssl_cafile": str(not_pem)},
        "ssl_certfile": {"security_protocol": "SSL", "ssl_certfile": str(tmp_path / "missing.pem")},
    }
    for field, values in cases.items():
        with pytest.raises(ValidationError) as raised:
            KafkaSettings(**values)  # type: ignore[arg-type]
        assert [e["loc"] for e in raised.value.errors()] == [(field,)], (field, raised.value)
    with pytest.raises(ValidationError, match="does no SASL"):
        KafkaSettings(sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p")
    with pytest.raises(ValidationError, match="does no TLS"):
        KafkaSettings(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u",
                      sasl_password="p", ssl_cafile=str(not_pem))
    secret = KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u",
                           sasl_password="hunter2")
    assert "hunter2" not in repr(secret) and "hunter2" not in str(secret.model_dump())
    assert secret.client_env()[f"{ENV}SASL_PASSWORD"] == "hunter2"


def test_a_component_refuses_a_bad_security_config_before_connecting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(f"{ENV}SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv(f"{ENV}SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv(f"{ENV}SASL_USERNAME", "kai")
    for command in (["processor"], ["topics", "create"], ["audit", "invariants", "--bootstrap-servers", "x:1"]):
        code, _, err = kai(command, capsys)
        one_line(code, err, f"{ENV}SASL_PASSWORD", "required with sasl_mechanism SCRAM-SHA-512")


def test_tansu_refuses_a_secure_start_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=r"Tansu 0\.6\.0.*cannot do SASL or TLS"):
        embedded_broker("tansu", secure=True)
    code, _, err = kai(["broker", "--engine", "tansu", "--secure"], capsys)
    one_line(code, err, "cannot do SASL or TLS", "--engine kafka")



@pytest.mark.kafka
async def test_a_durable_secure_broker_keeps_its_user_and_ca_across_a_restart(tmp_path: Path) -> None:
    first = KafkaBroker(memory=False, data_dir=tmp_path, secure=True, startup_timeout_s=240)
    async with first:
        before = first.client_settings()
        producer = make_producer(before)
        await producer.start()
        try:
            await (await producer.send("kept", b"before the restart", partition=0))
        finally:
            await producer.stop()
    assert (tmp_path / "kafka-sasl.json").stat().st_mode & 0o777 == 0o600
    assert before.ssl_cafile is not None
    ca = Path(before.ssl_cafile).read_bytes()
    async with KafkaBroker(memory=False, data_dir=tmp_path, secure=True, startup_timeout_s=240) as second:
        after = second.client_settings()
        assert (after.sasl_username, after.password()) == (before.sasl_username, before.password())
        assert after.ssl_cafile == before.ssl_cafile and Path(after.ssl_cafile).read_bytes() == ca
        assert [r.value for r in await read_topic(after, "kept")] == [b"before the restart"]


@pytest.mark.kafka
async def test_broker_command_prints_what_a_client_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, "broker", "--engine", "kafka", "--secure"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "300"},
    )
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        while not lines or "Ctrl-C" not in lines[-1]:
            line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 240)
            assert line, "".join(lines)
            lines.append(line)
        exports = dict(line[len("export ") :].strip().split("=", 1) for line in lines if line.startswith("export "))
        assert "security=SASL_SSL" in "".join(lines)
        for name, value in exports.items():
            monkeypatch.setenv(name, value)
        settings = KafkaSettings()
        assert (settings.security_protocol, settings.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
        assert await read_topic(settings, "cluster-events") == []  # created by the command, read over SASL_SSL
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "broker stopped" in out, out
