"""Fixtures the trace tests share: a cluster file of four 8-GPU nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kai_stream.trace.clusters import nodes_yaml


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cluster") / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(nodes_yaml(4, 8, "64", "256Gi"), sort_keys=False))
    return path
