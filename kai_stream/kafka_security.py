"""SASL_SSL for the embedded Apache Kafka broker: a throwaway CA and broker certificate, a SCRAM-SHA-512 user, and
the broker settings and client settings that go with them.

The certificates are made with the ``openssl`` command (EC P-256, valid a year; the broker's names localhost and
127.0.0.1), as PEM files that Kafka reads as they are (``ssl.keystore.type=PEM``): ``ca.crt`` for clients,
``broker.pem`` (the PKCS#8 key, then the certificate and the CA's) for the broker. The ``cryptography`` package is
not a dependency, and Java's ``keytool`` is far slower (README, "SASL over TLS").

The user is created in the KRaft bootstrap metadata when the log dir is formatted (``StorageTool format
--add-scram``): the broker authenticates it from its first start, with no admin call and no plaintext listener.
The client listener ``SASL_SSL`` is the inter-broker listener too (the broker logs in as that user); the controller
listener stays PLAINTEXT on loopback. Every authenticated user may do everything (no authorizer).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from kai_stream.broker import BrokerStartError
from kai_stream.settings import KafkaSettings

MECHANISM = "SCRAM-SHA-512"
PROTOCOL = "SASL_SSL"
USERNAME = "kai-stream"
LISTENER = "SASL_SSL"
_CERT_DAYS = "365"


@dataclass(frozen=True)
class Credentials:
    """The one SASL user of the embedded broker."""

    username: str
    password: SecretStr

    @classmethod
    def new(cls) -> Credentials:
        return cls(USERNAME, SecretStr(secrets.token_urlsafe(24)))

    def save(self, path: Path) -> None:
        """Kept beside a durable log dir (mode 0600): the user lives in its metadata across restarts."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"username": self.username, "password": self.password.get_secret_value()}, out)

    @classmethod
    def load(cls, path: Path) -> Credentials:
        data = json.loads(path.read_text())
        return cls(str(data["username"]), SecretStr(str(data["password"])))

    def scram_argument(self) -> str:
        """``StorageTool format --add-scram`` value creating this user."""
        return f"{MECHANISM}=[name={self.username},password={self.password.get_secret_value()}]"

    def jaas(self) -> str:
        return (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{self.username}" password="{self.password.get_secret_value()}";'
        )


@dataclass(frozen=True)
class TlsFiles:
    ca_file: Path
    keystore: Path


def _openssl(*args: str, cwd: Path) -> None:
    tool = shutil.which("openssl")
    if tool is None:
        raise BrokerStartError("the openssl command is needed to make the embedded broker's TLS certificates")
    done = subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BrokerStartError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def ensure_tls(directory: Path, host: str) -> TlsFiles:
    """The certificates in ``directory``, made there by ``make_tls`` unless a previous start did."""
    made = TlsFiles(ca_file=directory / "ca.crt", keystore=directory / "broker.pem")
    if made.ca_file.is_file() and made.keystore.is_file():
        return made
    return make_tls(directory, host)


def make_tls(directory: Path, host: str) -> TlsFiles:
    """A new CA and a broker certificate for ``host``, localhost and 127.0.0.1, in ``directory`` (created 0700)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *curve, "-keyout", "ca.key", "-out", "ca.crt", "-days", _CERT_DAYS,
             "-subj", "/CN=kai-stream embedded broker CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign", cwd=directory)
    _openssl("req", *curve, "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=localhost", cwd=directory)
    names = sorted({"DNS:localhost", "IP:127.0.0.1", f"IP:{host}" if host[:1].isdigit() else f"DNS:{host}"})
    (directory / "broker.ext").write_text(f"subjectAltName={','.join(names)}\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "broker.crt", "-days", _CERT_DAYS, "-extfile", "broker.ext", cwd=directory)
    keystore = directory / "broker.pem"
    keystore.write_text("".join((directory / name).read_text() for name in ("broker.key", "broker.crt", "ca.crt")))
    (directory / "ca.key").unlink()
    return TlsFiles(ca_file=directory / "ca.crt", keystore=keystore)


def listener_properties(host: str, port: int, controller_port: int, tls: TlsFiles, user: Credentials) -> dict[str, str]:
    """The server.properties entries that make the client (and inter-broker) listener SASL_SSL."""
    prefix = f"listener.name.{LISTENER.lower()}"
    return {
        "listeners": f"{LISTENER}://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"{LISTENER}://{host}:{port}",
        "listener.security.protocol.map": f"{LISTENER}:{PROTOCOL},CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": LISTENER,
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"{prefix}.{MECHANISM.lower()}.sasl.jaas.config": user.jaas(),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_file),
        "ssl.client.auth": "none",
    }


def client_settings(bootstrap_servers: str, tls: TlsFiles, user: Credentials, **overrides: object) -> KafkaSettings:
    """What a kai-stream client needs to reach the broker."""
    return KafkaSettings(
        bootstrap_servers=bootstrap_servers,
        security_protocol=PROTOCOL,
        sasl_mechanism=MECHANISM,
        sasl_username=user.username,
        sasl_password=user.password,
        ssl_cafile=str(tls.ca_file),
        **overrides,  # type: ignore[arg-type]
    )
