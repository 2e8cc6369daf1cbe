"""Lifecycle of an embedded Apache Kafka broker (KRaft, one combined broker + controller) on loopback.

The jars come from Maven Central through the Maven project ``kai_stream/brokers/kafka/pom.xml``:
``ensure_kafka_libs`` runs ``mvn dependency:copy-dependencies`` into ``~/.cache/kai-stream/kafka-<version>/libs``
(local Maven repository ``~/.cache/kai-stream/m2``) the first time, under a file lock, and reuses it afterwards.
``KAI_STREAM_CACHE_DIR`` moves the cache; ``java`` and ``mvn`` are taken from ``JAVA_HOME``/``PATH``.

``KafkaBroker`` writes ``server.properties`` and a log4j2 config into a work directory, formats the KRaft log
dir (``kafka.tools.StorageTool``, a random cluster id; a durable data dir is formatted once), runs
``java -cp 'libs/*' kafka.Kafka server.properties`` with a small heap, waits until a metadata request lists the
broker, and stops it with SIGTERM (controlled shutdown), then SIGKILL. Broker settings suit one machine and
tests: replication factor 1, few partitions for the internal topics, short cleaner and retention check
intervals (so compaction and retention show within seconds), short minimum session timeout. The broker's session
at the controller keeps Kafka's default: a broker restarted after kill -9 is registered once its dead
predecessor's session has expired, but a shorter one may fence the only broker on a loaded host
(benchmarks/README, "Broker kill -9").

``ClassArchive``: the JVM's class-data-sharing archive of the Kafka classpath, kept in the cache next to the jars
(``cds/``), so that a start maps the broker's classes instead of loading and verifying them again.

``secure=True`` makes the client listener SASL_SSL with SCRAM-SHA-512 (``kafka_security.py``: a throwaway CA, a
user created at format time); ``client_settings()`` then holds what a client needs, and readiness is probed by an
authenticated client.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError

from kai_stream import kafka_security
from kai_stream.broker import BrokerProcess, BrokerStartError, free_port, port_free, stop_process
from kai_stream.settings import KafkaSettings

KAFKA_VERSION = "4.1.1"
POM = Path(__file__).parent / "brokers" / "kafka" / "pom.xml"
JVM_OPTIONS = (
    "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:MaxDirectMemorySize=256m",
    "-Djava.awt.headless=true",
)
_STOP_GRACE_S = 15.0
_TAIL_CHARS = 3000
_DONE_MARK = ".complete"
LOG_LEVEL_ENV = "KAI_STREAM_KAFKA_LOG_LEVEL"
"""The broker's root log level (default ``warn``; ``info`` shows its start-up and recovery steps)."""

_LOG4J2 = """status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = info
"""


def cache_root() -> Path:
    """Where downloaded broker artifacts live (outside the clone)."""
    configured = os.environ.get("KAI_STREAM_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "kai-stream"


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    return cache_root() / f"kafka-{version}"


def _tool(name: str) -> str:
    java_home = os.environ.get("JAVA_HOME")
    if name == "java" and java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which(name)
    if found is None:
        raise BrokerStartError(f"`{name}` not found on PATH: Apache Kafka needs Java 17+ and Maven to fetch its jars")
    return found


def ensure_kafka_libs(version: str = KAFKA_VERSION, *, announce: IO[str] | None = None) -> Path:
    """The directory of Kafka's jars for ``version``, downloaded with Maven on first use."""
    home = kafka_home(version)
    libs = home / "libs"
    if (home / _DONE_MARK).is_file():
        return libs
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / _DONE_MARK).is_file():
            return libs
        out = announce if announce is not None else sys.stderr
        print(
            f"kai-stream: fetching Apache Kafka {version} and its dependencies from Maven Central into {home} "
            "(first use only, about a minute)",
            file=out,
            flush=True,
        )
        staging = home / "libs.partial"
        shutil.rmtree(staging, ignore_errors=True)
        argv = [
            _tool("mvn"),
            "-q",
            "-B",
            "-f",
            str(POM),
            f"-Dkafka.version={version}",
            f"-Dmaven.repo.local={cache_root() / 'm2'}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not any(staging.glob(f"kafka_2.13-{version}.jar")):
            raise BrokerStartError(
                f"Maven could not fetch Apache Kafka {version} (exit {done.returncode}):\n"
                + (done.stdout + done.stderr)[-_TAIL_CHARS:]
            )
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        (home / _DONE_MARK).write_text(version)
    return libs


class ClassArchive:
    """A dynamic class-data-sharing archive of the broker's classpath (``-XX:SharedArchiveFile``).

    None exists on a fresh machine: a broker started without one records it (``-XX:ArchiveClassesAtExit``), which
    its JVM writes when it exits after a SIGTERM (not after SIGKILL); the dump replaces the archive only once a
    JVM has mapped it (``-Xshare:on``), since a truncated archive crashes the JVM that maps it. An archive that a
    broker dies with during its start is removed (``discard``) and the broker started without it. The name carries
    a digest of the JVM and the jars: another JDK or other jars make (and then use) another archive.
    """

    def __init__(self, directory: Path, java: str, libs: Path) -> None:
        self.java = java
        self.libs = libs
        self.path = directory / f"kafka-{self._digest()}.jsa"
        self.in_use = False
        self._recording: Path | None = None

    def _digest(self) -> str:
        files = [Path(self.java).resolve(), *sorted(self.libs.glob("*.jar"))]
        parts = [f"{path}:{path.stat().st_size}:{path.stat().st_mtime_ns}" for path in files]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    def use(self) -> list[str]:
        """The JVM options that map the archive; none while there is none."""
        self.in_use = self.path.is_file()
        return [f"-XX:SharedArchiveFile={self.path}"] if self.in_use else []

    def use_or_record(self) -> list[str]:
        """The options that map the archive, or, while there is none, record one at this JVM's exit."""
        if options := self.use():
            return options
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:  # a read-only cache: start without
            return []
        for stale in self.path.parent.glob("*.partial"):  # left by a recording process that was killed
            with contextlib.suppress(OSError):
                if stale.stat().st_mtime < time.time() - 3600:
                    stale.unlink()
        self._recording = self.path.with_name(f"{self.path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")
        return [f"-XX:ArchiveClassesAtExit={self._recording}"]

    def promote(self) -> None:
        """Once the recording JVM has exited: its dump becomes the archive if a JVM maps it."""
        recording, self._recording = self._recording, None
        if recording is None or not recording.is_file():
            return
        try:
            if self._maps(recording):
                os.replace(recording, self.path)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                recording.unlink(missing_ok=True)

    def _maps(self, archive: Path) -> bool:
        check = [self.java, *JVM_OPTIONS, "-Xshare:on", f"-XX:SharedArchiveFile={archive}"]
        try:
            with tempfile.TemporaryDirectory(prefix="kai-stream-cds-check-") as crashes:  # where a crash reports
                done = subprocess.run(
                    [*check, f"-XX:ErrorFile={crashes}/hs_err_%p.log", "-cp", str(self.libs / "*"), "kafka.Kafka"],
                    capture_output=True, text=True, timeout=120, check=False,
                )
        except subprocess.TimeoutExpired:
            return False
        return "USAGE: java [options] kafka.Kafka" in done.stdout + done.stderr

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
        self.in_use = False


def ensure_class_archive(version: str = KAFKA_VERSION) -> Path:
    """The broker's ``ClassArchive`` in the cache, recorded by starting and stopping a broker when there is none."""
    broker = KafkaBroker(memory=True, version=version, startup_timeout_s=300)
    archive = ClassArchive(broker.archive_dir, _tool("java"), ensure_kafka_libs(version))
    if not archive.path.is_file():
        with broker:
            pass
    return archive.path


class _ExitedDuringStart(BrokerStartError):
    """The broker's JVM exited before it answered."""


def random_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as ``kafka-storage random-uuid``)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _metadata_v0(correlation_id: int) -> bytes:
    client_id = b"kai-stream-probe"
    body = struct.pack(">hhih", 3, 0, correlation_id, len(client_id)) + client_id + struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


def lists_brokers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when the broker at host:port answers a metadata request naming at least one broker."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(_metadata_v0(11))
            header = b""
            while len(header) < 12:
                chunk = sock.recv(12 - len(header))
                if not chunk:
                    return False
                header += chunk
    except OSError:
        return False
    _, correlation, brokers = struct.unpack(">iii", header)
    return bool(correlation == 11 and brokers >= 1)


def lists_brokers_as(settings: KafkaSettings, timeout_s: float = 5.0) -> bool:
    """``lists_brokers`` for a listener that wants TLS and SASL: a metadata answer to an authenticated client."""
    host, _, port = settings.bootstrap_servers.rpartition(":")
    with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=timeout_s):
        async def probe() -> bool:
            client = AIOKafkaClient(**settings.client_kwargs())
            try:
                await asyncio.wait_for(client.bootstrap(), timeout_s)
                return bool(client.cluster.brokers())
            except (KafkaError, OSError, TimeoutError):
                return False
            finally:
                await client.close()

        with ThreadPoolExecutor(1) as thread:  # the caller may be on an event loop's thread
            return thread.submit(lambda: asyncio.run(probe())).result()
    return False


def server_properties(
    host: str, port: int, controller_port: int, log_dir: Path, listeners: dict[str, str] | None = None
) -> str:
    """The broker's configuration: one node, both roles, loopback listeners (PLAINTEXT unless ``listeners``
    replaces those entries)."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "log.segment.bytes": str(16 * 1024 * 1024),
        "log.retention.check.interval.ms": "1000",
        "log.initial.task.delay.ms": "500",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        "log.cleaner.backoff.ms": "500",
        "log.segment.delete.delay.ms": "1000",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "500",
        "auto.create.topics.enable": "true",
    }
    settings.update(listeners or {})
    return "".join(f"{key}={value}\n" for key, value in settings.items())


class KafkaBroker(BrokerProcess):
    """Apache Kafka on loopback: ``memory`` keeps its log dir in a temp dir removed on stop, otherwise under
    ``data_dir/kafka`` (records and committed offsets survive a restart).

    Same interface as ``EmbeddedBroker``: ``start()``/``stop()``, (async) context manager, ``bootstrap_servers``,
    ``pid``, ``running``, ``output_tail()``, ``client_settings()``. ``secure``: the client listener is SASL_SSL
    (``kafka_security.py``); a durable log dir keeps its user's password in ``data_dir/kafka-sasl.json`` and its
    certificates in ``data_dir/kafka-tls``, so clients reconnect after a restart.
    """

    engine = "kafka"

    def __init__(
        self,
        *,
        memory: bool = True,
        port: int | None = None,
        data_dir: Path | str = Path(".kai-stream"),
        host: str = "127.0.0.1",
        startup_timeout_s: float = 90.0,
        version: str = KAFKA_VERSION,
        secure: bool = False,
        archive_dir: Path | None = None,
    ) -> None:
        super().__init__(memory=memory, port=port, data_dir=data_dir, host=host, startup_timeout_s=startup_timeout_s)
        self.version = version
        self.secure = secure
        self._tls: kafka_security.TlsFiles | None = None
        self._user: kafka_security.Credentials | None = None
        self.archive_dir = archive_dir if archive_dir is not None else kafka_home(version) / "cds"
        """Where the ``ClassArchive`` lives (the cache by default)."""
        self._archive: ClassArchive | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._log: IO[bytes] | None = None

    def _process(self) -> subprocess.Popen[bytes] | None:
        return self._proc

    @property
    def log_path(self) -> Path | None:
        """The broker's console log (stdout and stderr) while it runs; None once stopped."""
        return Path(self._workdir.name) / "kafka.log" if self._workdir is not None else None

    def output_tail(self) -> str:
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text(errors="replace")[-_TAIL_CHARS:]
        except OSError:
            return ""

    def client_settings(self, **overrides: Any) -> KafkaSettings:
        """Settings for a client of this (started) broker: its address and, when ``secure``, SASL_SSL with its
        user and CA file; the rest from the environment or ``overrides``."""
        if self._tls is None or self._user is None:
            return super().client_settings(**overrides)
        return kafka_security.client_settings(self.bootstrap_servers, self._tls, self._user, **overrides)

    def _credentials(self, log_dir: Path) -> kafka_security.Credentials:
        if self.memory:
            return self._user or kafka_security.Credentials.new()
        saved = self.data_dir / "kafka-sasl.json"
        if (log_dir / "meta.properties").is_file():
            if not saved.is_file():
                raise BrokerStartError(
                    f"{log_dir} was formatted without --secure, so it has no SASL user; "
                    "start it without --secure, or remove it to start afresh"
                )
            return kafka_security.Credentials.load(saved)
        user = kafka_security.Credentials.new()
        user.save(saved)
        return user

    def start(self) -> str:
        """Fetch the jars if needed, format the log dir, start the JVM and wait until it lists itself (once more
        without the class archive if the JVM died with it)."""
        if self.running:
            return self.bootstrap_servers
        libs = ensure_kafka_libs(self.version)
        archive = ClassArchive(self.archive_dir, _tool("java"), libs)
        try:
            return self._start(libs, archive)
        except _ExitedDuringStart:
            if not archive.in_use:
                raise
            archive.discard()
            return self._start(libs, archive)

    def _start(self, libs: Path, archive: ClassArchive) -> str:
        self._workdir = tempfile.TemporaryDirectory(prefix="kai-stream-kafka-")
        work = Path(self._workdir.name)
        try:
            port = self.requested_port if self.requested_port is not None else free_port(self.host)
            if not port_free(self.host, port):
                raise BrokerStartError(f"port {self.host}:{port} is already in use")
            controller_port = free_port(self.host)
            log_dir = work / "logs" if self.memory else (self.data_dir / "kafka").resolve()
            log_dir.mkdir(parents=True, exist_ok=True)
            config = work / "server.properties"
            listeners: dict[str, str] = {}
            scram: list[str] = []
            if self.secure:
                tls_dir = work / "tls" if self.memory else self.data_dir / "kafka-tls"
                self._tls = kafka_security.ensure_tls(tls_dir, self.host)
                self._user = self._credentials(log_dir)
                listeners = kafka_security.listener_properties(self.host, port, controller_port, self._tls, self._user)
                scram = ["--add-scram", self._user.scram_argument()]
            config.write_text(server_properties(self.host, port, controller_port, log_dir, listeners))
            (work / "log4j2.properties").write_text(_LOG4J2.format(level=os.environ.get(LOG_LEVEL_ENV, "warn")))
            java = [
                _tool("java"), *JVM_OPTIONS, f"-Dlog4j2.configurationFile={work / 'log4j2.properties'}",
                f"-XX:ErrorFile={work / 'hs_err_%p.log'}",
            ]
            classpath = ["-cp", str(libs / "*")]
            if not (log_dir / "meta.properties").is_file():
                fmt = [*java, *archive.use(), *classpath, "kafka.tools.StorageTool", "format", "--config", str(config)]
                done = subprocess.run(
                    [*fmt, f"--cluster-id={random_cluster_id()}", "--ignore-formatted", *scram],  # id may start with -
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode != 0:
                    output = (done.stdout + done.stderr)[-_TAIL_CHARS:]
                    raise _ExitedDuringStart(f"formatting the KRaft log dir failed:\n{output}")
            self._log = open(work / "kafka.log", "wb")  # noqa: SIM115
            self._archive = archive
            self._proc = subprocess.Popen(
                [*java, *archive.use_or_record(), *classpath, "kafka.Kafka", str(config)],
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self._wait(port)
            self.port = port
        except BaseException:
            self.stop()
            raise
        return self.bootstrap_servers

    def _wait(self, port: int) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                raise _ExitedDuringStart(f"kafka exited with code {code} during startup:\n{self.output_tail()}")
            if self._answers(port):
                return
            time.sleep(0.1)
        raise BrokerStartError(f"kafka did not answer within {self.startup_timeout_s:.0f}s:\n{self.output_tail()}")

    def _answers(self, port: int) -> bool:
        if self._tls is None or self._user is None:
            return lists_brokers(self.host, port)
        return lists_brokers_as(kafka_security.client_settings(f"{self.host}:{port}", self._tls, self._user))

    def stop(self) -> None:
        """SIGTERM (controlled shutdown), SIGKILL after a grace period; safe to call twice."""
        proc, self._proc = self._proc, None
        stop_process(proc, _STOP_GRACE_S)
        self._tls = None
        archive, self._archive = self._archive, None
        if archive is not None:
            archive.promote()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._workdir is not None:
            with contextlib.suppress(OSError):
                self._workdir.cleanup()
            self._workdir = None
