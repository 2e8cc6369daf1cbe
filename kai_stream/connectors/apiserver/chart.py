"""The Helm chart's objects the control plane installs: the CRDs, the ClusterRoles with their bindings, and the
ServiceAccounts, rendered by the pinned helm (``deploy/fetch_helm.py``) exactly as ``helm install`` would."""

from __future__ import annotations

import importlib.util
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "kai-stream"
RELEASE = "kai-stream"
NAMESPACE = "kai-stream"


@cache
def _helm() -> Path:
    spec = importlib.util.spec_from_file_location("kai_stream_deploy_fetch_helm", REPO / "deploy" / "fetch_helm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path: Path = module.ensure_helm()
    return path


def render(*templates: str) -> list[dict[str, Any]]:
    """The chart's objects from ``templates`` (e.g. ``crds.yaml``), release ``kai-stream`` in its namespace."""
    shown = [arg for name in templates for arg in ("--show-only", f"templates/{name}")]
    result = subprocess.run(
        [str(_helm()), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *shown],
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"helm template failed: {result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def component_account(component: str) -> str:
    """The ServiceAccount (and ClusterRole) name the chart gives ``component``."""
    return f"{RELEASE}-{component}"
