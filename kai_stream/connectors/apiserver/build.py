"""The control plane's binaries: etcd, kube-apiserver and KWOK, built from the pinned Go modules under ``go/``.

Each Go binary is built once into ``~/.cache/kai-stream/bin/<name>-<hash>`` (``KAI_STREAM_CACHE_DIR`` moves the
cache), where the hash covers the module's go.mod and go.sum: a changed pin builds anew, an unchanged one reuses
the binary. Module downloads and the Go build cache live under ``~/.cache/kai-stream/go/``. A file lock keeps two
processes from building the same binary at once. etcd is built too (v3.6, the version kube-apiserver v1.34's
client is pinned to): Debian's etcd-server is 3.4, which lacks the watch progress requests kube-apiserver sends.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

GO_MODULES = Path(__file__).resolve().parent / "go"
GO_FALLBACK = Path("/usr/local/go/bin/go")
NICE = ("nice", "-n", "10") if shutil.which("nice") else ()
PR_SET_PDEATHSIG = 1


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
ETCD = GoTool("etcd", "go.etcd.io/etcd/server/v3")


def cache_dir() -> Path:
    return Path(os.environ.get("KAI_STREAM_CACHE_DIR", Path.home() / ".cache" / "kai-stream"))


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


def go_module_dir(module_path: str, module: Path) -> Path:
    """Where the Go module ``module_path``, as required by the go.mod in ``module``, lies in the module cache
    (downloaded through the module proxy when missing)."""
    result = subprocess.run([str(go_binary()), "list", "-m", "-f", "{{.Dir}}", module_path], cwd=module,
                            env=go_env(), capture_output=True, text=True, check=False)
    if result.returncode != 0 or not result.stdout.strip():
        raise BuildError(f"go list -m {module_path} failed: {result.stderr[-2000:]}")
    return Path(result.stdout.strip())


def _die_with_caller() -> None:
    """A build whose caller is killed stops too (Linux ``PR_SET_PDEATHSIG``), rather than running on unowned
    while the next caller takes the released lock and builds the same binary beside it."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


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
            [*NICE, str(go_binary()), "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), tool.package],
            cwd=tool.module, env=go_env(), capture_output=True, text=True, check=False, preexec_fn=_die_with_caller,
        )
        if result.returncode != 0:
            raise BuildError(f"go build {tool.package} failed ({result.returncode}):\n{result.stderr[-4000:]}")
        partial.rename(target)
        log.warning("built %s in %.0f s", tool.name, time.monotonic() - started)
    return target


def ensure_openssl() -> Path:
    found = shutil.which("openssl")
    if found is None:
        raise BuildError("the openssl command is needed to make the control plane's certificates")
    return Path(found)
