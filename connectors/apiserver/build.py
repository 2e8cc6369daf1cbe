"""The control plane's binaries: kube-apiserver and KWOK built from the pinned Go modules under ``go/``, and etcd.

Each Go binary is built once into ``~/.cache/kai-stream/bin/<name>-<hash>`` (``KAI_STREAM_CACHE`` moves the
cache), where the hash covers the module's go.mod and go.sum: a changed pin builds anew, an unchanged one reuses
the binary. Module downloads and the Go build cache live under ``~/.cache/kai-stream/go/``. A file lock keeps two
processes from building the same binary at once. etcd comes from Debian's ``etcd-server`` package, installed with
apt-get when no ``etcd`` is on the PATH.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

GO_MODULES = Path(__file__).resolve().parent / "go"
GO_FALLBACK = Path("/usr/local/go/bin/go")


class BuildError(RuntimeError):
    """A binary of the control plane could not be built or installed."""


@dataclass(frozen=True)
class GoTool:
    """``package`` built from the Go module in ``directory`` (default ``go/<name>`` here) as binary ``name``."""

    name: str
    package: str
    directory: Path | None = None

    @property
    def module(self) -> Path:
        return self.directory if self.directory is not None else GO_MODULES / self.name


KUBE_APISERVER = GoTool("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver")
KWOK = GoTool("kwok", "sigs.k8s.io/kwok/cmd/kwok")


def cache_dir() -> Path:
    return Path(os.environ.get("KAI_STREAM_CACHE", Path.home() / ".cache" / "kai-stream"))


def go_binary() -> Path:
    found = shutil.which("go")
    if found is not None:
        return Path(found)
    if GO_FALLBACK.exists():
        return GO_FALLBACK
    raise BuildError("no Go toolchain: put `go` on the PATH (or at /usr/local/go/bin/go) to build the control plane")


def go_env() -> dict[str, str]:
    root = cache_dir() / "go"
    return {
        **os.environ,
        "GOMODCACHE": str(root / "mod"),
        "GOCACHE": str(root / "build"),
        "GOFLAGS": "-mod=mod",
    }


def binary_path(tool: GoTool) -> Path:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((tool.module / name).read_bytes())
    return cache_dir() / "bin" / f"{tool.name}-{digest.hexdigest()[:12]}"


def ensure_go_tool(tool: GoTool) -> Path:
    """The cached binary of ``tool``, built first when this go.mod/go.sum has none yet."""
    target = binary_path(tool)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{tool.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        partial = target.with_suffix(".partial")
        started = time.monotonic()
        log.warning("building %s from %s (first run; cached afterwards at %s)", tool.name, tool.module, target)
        result = subprocess.run(
            [str(go_binary()), "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), tool.package],
            cwd=tool.module, env=go_env(), capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            raise BuildError(f"go build {tool.package} failed ({result.returncode}):\n{result.stderr[-4000:]}")
        partial.rename(target)
        log.warning("built %s in %.0f s", tool.name, time.monotonic() - started)
    return target


def ensure_etcd() -> Path:
    """``etcd`` from the PATH, installing Debian's etcd-server first when it is missing."""
    found = shutil.which("etcd")
    if found is not None:
        return Path(found)
    apt = shutil.which("apt-get")
    if apt is None:
        raise BuildError("no etcd on the PATH and no apt-get to install etcd-server")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "-qq", "etcd-server"]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run([apt, "update", "-qq"], env=env, capture_output=True, check=False)
        result = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BuildError(f"apt-get install etcd-server failed:\n{result.stderr[-2000:]}")
    found = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
    if found is None:
        raise BuildError("etcd-server installed but no etcd binary found")
    return Path(found)


def ensure_openssl() -> Path:
    found = shutil.which("openssl")
    if found is None:
        raise BuildError("the openssl command is needed to make the control plane's certificates")
    return Path(found)
