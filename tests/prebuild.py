"""What the tests start, made ready before the session: Apache Kafka's jars (Maven) and its JVM class archive (a
broker started and stopped once), and the Go binaries (etcd,
kube-apiserver, KWOK, KAI's two simulators), all in the cache outside the clone (``KAI_STREAM_CACHE_DIR``).

``make test`` runs this before pytest, so a first run's downloads and compiles happen once, in the open, with
their time printed, never inside a test's timeout. With the cache filled, every step returns at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from kai_stream.connectors.apiserver import build
from kai_stream.kafka_engine import ensure_class_archive, ensure_kafka_libs
from tests.kai_oracle.oracle import FAIRSHARE, TIME_AWARE


def steps() -> list[tuple[str, Callable[[], Path]]]:
    tools = (build.ETCD, build.KUBE_APISERVER, build.KWOK, FAIRSHARE, TIME_AWARE)
    go = [(tool.name, partial(build.ensure_go_tool, tool)) for tool in tools]
    kafka = [("Apache Kafka jars", ensure_kafka_libs), ("Apache Kafka class archive", ensure_class_archive)]
    return [*kafka, *go]


def main() -> None:
    began = time.monotonic()
    for name, step in steps():
        started = time.monotonic()
        where = step()
        print(f"prebuild: {name} ready in {time.monotonic() - started:.0f} s ({where})", flush=True)
    print(f"prebuild: everything the tests start is ready ({time.monotonic() - began:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
