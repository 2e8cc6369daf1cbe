"""The Apache Kafka broker's class-data-sharing archive (``kafka_engine.ClassArchive``): recorded by a broker that
stops cleanly, mapped by the next start, replaced when the JVM or a jar changes, and a broken one (a truncated
archive crashes the JVM that maps it) is dropped: the broker starts without it and records a new one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kai_stream.kafka_engine import ClassArchive, KafkaBroker, lists_brokers


def _cmdline(pid: int | None) -> str:
    assert pid is not None
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_the_archive_is_named_after_the_jvm_and_the_jars(tmp_path: Path) -> None:
    java, libs = tmp_path / "java", tmp_path / "libs"
    libs.mkdir()
    java.write_bytes(b"jvm")
    (libs / "kafka.jar").write_bytes(b"one")
    stamp = (libs / "kafka.jar").stat().st_mtime_ns
    first = ClassArchive(tmp_path / "cds", str(java), libs).path
    assert first == ClassArchive(tmp_path / "cds", str(java), libs).path
    (libs / "kafka.jar").write_bytes(b"other")
    assert ClassArchive(tmp_path / "cds", str(java), libs).path != first
    (libs / "kafka.jar").write_bytes(b"one")
    os.utime(libs / "kafka.jar", ns=(stamp, stamp))
    assert ClassArchive(tmp_path / "cds", str(java), libs).path == first
    java.write_bytes(b"another jvm")
    assert ClassArchive(tmp_path / "cds", str(java), libs).path != first
    assert ClassArchive(tmp_path / "cds", str(java), libs).use() == []


@pytest.mark.kafka
def test_a_clean_stop_records_the_archive_the_next_start_maps_it_and_a_broken_one_is_dropped(tmp_path: Path) -> None:
    cds = tmp_path / "cds"
    broker = KafkaBroker(archive_dir=cds, startup_timeout_s=300)
    with broker:
        assert "-XX:ArchiveClassesAtExit=" in _cmdline(broker.pid)
    archives = list(cds.iterdir())
    assert [a.suffix for a in archives] == [".jsa"] and archives[0].stat().st_size > 1_000_000

    with broker:
        assert f"-XX:SharedArchiveFile={archives[0]}" in _cmdline(broker.pid)
        assert lists_brokers(broker.host, broker.port or 0)

    archives[0].write_bytes(archives[0].read_bytes()[: archives[0].stat().st_size // 2])
    with broker:
        assert lists_brokers(broker.host, broker.port or 0)
        assert "-XX:ArchiveClassesAtExit=" in _cmdline(broker.pid)
    assert [a.name for a in cds.iterdir()] == [archives[0].name]
    assert archives[0].stat().st_size > 1_000_000
