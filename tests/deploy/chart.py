"""Render the Helm chart with the pinned helm (fetched once into .ci/.cache by deploy/fetch_helm.py)."""

from __future__ import annotations

import importlib.util
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "kai-stream"
EXAMPLE_VALUES = REPO / "deploy" / "values-example.yaml"


def load_deploy_module(name: str) -> Any:
    """Import deploy/<name>.py (deploy/ holds scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"kai_stream_deploy_{name}", REPO / "deploy" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fetch_helm = load_deploy_module("fetch_helm")
check_crds = load_deploy_module("check_crds")


@cache
def helm() -> Path:
    path: Path = fetch_helm.ensure_helm()
    return path


def render_text(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm()), "template", "kai-stream", str(CHART), "--namespace", "kai-stream", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def render(*args: str) -> list[dict[str, Any]]:
    result = render_text(*args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == kind}
