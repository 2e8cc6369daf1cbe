"""The topics' layout without a broker: the specs under ``topics/`` and which partition a pool's events go to.

``partition_for`` is Kafka's default partitioner for a string key (murmur2 of the key's bytes, Java client's
``Utils.murmur2``, sign bit cleared, modulo the partition count), so the in-process emulation numbers offsets
per partition as the live broker does. ``kai_stream.topics`` (schemas, creation) and ``kai_stream.kafka`` build on
this module; it imports no Kafka client.
"""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

TOPICS_DIR = Path(os.environ.get("KAI_STREAM_TOPICS_DIR", Path(__file__).resolve().parent.parent / "topics"))

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


class TopicSpec(BaseModel):
    """One topic: its name, what keys it, how it is partitioned and retained, and its schema."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    name: str
    key: str
    partitions: int = Field(ge=1)
    retention_ms: int = Field(ge=-1)
    schema_file: str = Field(alias="schema")
    model: str
    max_message_bytes: int | None = Field(default=None, ge=1024)
    """The topic's ``max.message.bytes`` (largest record batch) where the broker's default is too small."""

    def model_type(self) -> Any:
        """The pydantic type (model or annotated union) named by ``model`` (``module:attribute``)."""
        module_name, _, attr = self.model.partition(":")
        if not attr:
            raise ValueError(f"topic {self.name}: model must be 'module:attribute', got {self.model!r}")
        return getattr(importlib.import_module(module_name), attr)

    def json_schema(self) -> dict[str, Any]:
        schema = TypeAdapter(self.model_type()).json_schema(mode="serialization")
        return {"$schema": JSON_SCHEMA_DIALECT, "title": self.name, **schema}

    def configs(self) -> dict[str, str]:
        configs = {"retention.ms": str(self.retention_ms)}
        if self.max_message_bytes is not None:
            configs["max.message.bytes"] = str(self.max_message_bytes)
        return configs


def load_specs(directory: Path = TOPICS_DIR) -> list[TopicSpec]:
    """Every ``*.yaml`` spec in ``directory``, sorted by topic name; errors name the file and field."""
    specs: list[TopicSpec] = []
    for path in sorted(directory.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        try:
            specs.append(TopicSpec.model_validate(data))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc
    if not specs:
        raise FileNotFoundError(f"no topic specs (*.yaml) in {directory}")
    return sorted(specs, key=lambda spec: spec.name)


def cluster_events_partitions() -> int:
    """Partitions of the cluster-events topic (its spec under topics/)."""
    return next(spec.partitions for spec in load_specs() if spec.name == "cluster-events")


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``) of ``data``, unsigned 32 bits."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    for i in range(0, length - length % 4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & ~3
    extra = length % 4
    if extra >= 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


@functools.lru_cache(maxsize=4096)
def partition_for(pool: str, num_partitions: int) -> int:
    """The partition of ``pool`` among ``num_partitions`` (Kafka's default murmur2 key hash, stable). Asked for every
    record the processor folds, so the answers for the last few thousand pools are kept."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2(pool.encode()) & 0x7FFFFFFF) % num_partitions
