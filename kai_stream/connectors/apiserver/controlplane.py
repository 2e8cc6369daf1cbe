"""A real Kubernetes control plane on loopback: etcd, kube-apiserver (RBAC on) and KWOK playing the kubelets.

``ControlPlane.start()`` picks free ports, makes a CA and a serving certificate (openssl), an admin token
(``--token-auth-file``, group system:masters) and a ServiceAccount signing key, starts etcd and kube-apiserver,
waits for ``/readyz``, writes an admin kubeconfig, installs the chart's CRDs, ClusterRoles, ClusterRoleBindings
and ServiceAccounts (``chart.py``), and starts KWOK with the stages in ``kwok-stages.yaml``: every node is KWOK's
(Ready), a bound pod turns Running, a deleted pod goes away when its grace period ends. ``stop()`` ends KWOK,
the apiserver and etcd (SIGTERM, then SIGKILL) and removes the work directory.

No controller manager runs: nothing creates a namespace's ``default`` ServiceAccount, so the ServiceAccount
admission plugin is off (pods need none); no garbage collection, no namespace deletion, no workload controllers.

``service_account_kubeconfig(component)`` asks the TokenRequest API for a token of the chart's ServiceAccount
of that component and writes a kubeconfig holding it: a client using it has exactly the chart's permissions.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kai_stream.broker import stop_process
from kai_stream.connectors.apiserver import build, chart

log = logging.getLogger(__name__)

STAGES = Path(__file__).resolve().parent / "kwok-stages.yaml"
ADMIN_USER = "kai-stream-admin"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
START_TIMEOUT_S = 120.0
LOAD_CONCURRENCY = 16
"""Requests ``load_objects`` keeps in flight (each object's create and patches stay in order)."""
NAMESPACED = frozenset({"Pod", "PodGroup", "ServiceAccount", "Role", "RoleBinding"})


class ControlPlaneError(RuntimeError):
    """The control plane failed to start; the message carries the tail of the failing process's log."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run([str(build.ensure_openssl()), *args], cwd=cwd, capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed: {result.stderr}")


def make_pki(directory: Path) -> None:
    """ca.crt/ca.key, serving.crt/serving.key (127.0.0.1, localhost) and sa.key/sa.pub in ``directory``."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "30",
             "-subj", "/CN=kai-stream-test-ca", cwd=directory)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "serving.key", "-out", "serving.csr",
             "-subj", "/CN=kube-apiserver", cwd=directory)
    (directory / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "serving.crt", "-days", "30", "-extfile", "san.ext", cwd=directory)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)


def kubeconfig(server: str, ca_file: Path, token: str, user: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kai-stream", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "kai-stream", "user": user}}],
        "current-context": user,
    }


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + KWOK. ``url``, ``kubeconfig`` (admin), ``ca_file`` and ``token`` once started."""

    workdir: Path | None = None
    kwok: bool = True
    url: str = ""
    token: str = ""
    _processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _tmp: tempfile.TemporaryDirectory[str] | None = None
    _ssl_context: ssl.SSLContext | None = None

    @property
    def ca_file(self) -> Path:
        return self._dir / "pki" / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self._dir / "admin.kubeconfig"

    @property
    def _dir(self) -> Path:
        assert self.workdir is not None, "not started"
        return self.workdir

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ControlPlane:
        apiserver = build.ensure_go_tool(build.KUBE_APISERVER)
        kwok = build.ensure_go_tool(build.KWOK) if self.kwok else None
        etcd = build.ensure_go_tool(build.ETCD)
        if self.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kai-stream-apiserver-")
            self.workdir = Path(self._tmp.name)
        pki = self._dir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        make_pki(pki)
        self.token = uuid.uuid4().hex
        (self._dir / "tokens.csv").write_text(f'{self.token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        try:
            self._start_etcd(etcd)
            self._start_apiserver(apiserver)
            self.kubeconfig.write_text(yaml.safe_dump(kubeconfig(self.url, self.ca_file, self.token, ADMIN_USER)))
            self.install_chart()
            if kwok is not None:
                self._start_kwok(kwok)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in ("kwok", "kube-apiserver", "etcd"):
            stop_process(self._processes.pop(name, None), grace_s=15)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.workdir = None

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self._processes.items() if proc.poll() is None}

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log_file = open(self._dir / f"{name}.log", "ab")  # noqa: SIM115
        with log_file:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=None if env is None else {**os.environ, **env})
        self._processes[name] = proc
        return proc

    def log_tail(self, name: str, chars: int = 4000) -> str:
        path = self._dir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def _wait(self, name: str, ready: Any, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        proc = self._processes[name]
        while not ready():
            if proc.poll() is not None:
                raise ControlPlaneError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{name} not ready after {timeout:.0f} s:\n{self.log_tail(name)}")
            time.sleep(0.1)

    def _start_etcd(self, etcd: Path) -> None:
        client, peer = _free_port(), _free_port()
        self._etcd_url = f"http://127.0.0.1:{client}"
        self._spawn("etcd", [
            str(etcd), "--name", "kai-stream", "--data-dir", str(self._dir / "etcd"),
            "--listen-client-urls", self._etcd_url, "--advertise-client-urls", self._etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"kai-stream=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{self._etcd_url}/health", timeout=2) as response:
                    return bool(json.loads(response.read()).get("health") == "true")
            except (OSError, ValueError):
                return False

        self._wait("etcd", healthy)

    def _start_apiserver(self, apiserver: Path) -> None:
        port = _free_port()
        self.url = f"https://127.0.0.1:{port}"
        pki = self._dir / "pki"
        self._spawn("kube-apiserver", [
            str(apiserver),
            f"--etcd-servers={self._etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--tls-cert-file={pki / 'serving.crt'}", f"--tls-private-key-file={pki / 'serving.key'}",
            f"--cert-dir={pki}",
            f"--token-auth-file={self._dir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            "--enable-logs-handler=false",
            "--disable-admission-plugins=ServiceAccount",
            "--endpoint-reconciler-type=none",
            "--v=1",
        ])
        self._wait("kube-apiserver", lambda: self._get_status("/readyz") == 200)

    def _start_kwok(self, kwok: Path) -> None:
        self._spawn("kwok", [
            str(kwok), f"--kubeconfig={self.kubeconfig}", f"--config={STAGES}",
            "--manage-all-nodes=true", "--server-address=", "--v=WARN",
        ], env={"KUBE_FEATURE_WatchListClient": "false"})

        def running() -> bool:
            return "kwok" in self._processes and self._processes["kwok"].poll() is None

        time.sleep(0.2)
        self._wait("kwok", running, timeout=5)

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (through its JSON gateway): watches from older
        resourceVersions then fail with 410 Expired. Returns the revision."""
        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            req = urllib.request.Request(self._etcd_url + path, data=json.dumps(body).encode(), method="POST")
            with urllib.request.urlopen(req, timeout=10) as response:
                return _decode(response.read())

        revision = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    # ------------------------------------------------------------------ plain requests as admin

    def _ssl(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context(cafile=str(self.ca_file))
        return self._ssl_context

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": content_type, "Accept": "application/json",
        })
        try:
            with urllib.request.urlopen(req, context=self._ssl(), timeout=30) as response:
                return response.status, _decode(response.read())
        except urllib.error.HTTPError as err:
            return err.code, _decode(err.read())

    def _get_status(self, path: str) -> int:
        try:
            return self.request("GET", path)[0]
        except (OSError, ValueError):
            return 0

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj`` (or leave it when it exists); returns the server's object."""
        path = collection_path(obj)
        code, answer = self.request("POST", path, obj)
        if code == 409:
            code, answer = self.request("GET", f"{path}/{obj['metadata']['name']}")
        if code >= 300:
            raise ControlPlaneError(f"creating {obj['kind']} {obj['metadata']['name']}: {code} {answer}")
        return answer

    # ------------------------------------------------------------------ the chart's objects

    def install_chart(self) -> None:
        """CRDs (waiting until each is served), the chart's namespace, ServiceAccounts and RBAC."""
        crds = chart.render("crds.yaml")
        for crd in crds:
            self.apply(crd)
        for crd in crds:
            group = crd["spec"]["group"]
            plural = crd["spec"]["names"]["plural"]
            for version in crd["spec"]["versions"]:
                path = f"/apis/{group}/{version['name']}/{plural}"
                self._wait("kube-apiserver", lambda p=path: self._get_status(p) == 200, timeout=60)
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": chart.NAMESPACE}})
        for obj in chart.render("serviceaccounts.yaml", "rbac.yaml"):
            obj.setdefault("metadata", {})
            if obj["kind"] == "ServiceAccount":
                obj["metadata"]["namespace"] = chart.NAMESPACE
            self.apply(obj)

    def load_objects(self, objs: list[dict[str, Any]], concurrency: int = LOAD_CONCURRENCY) -> None:
        """Create scenario objects as the simulated cluster's ``load_objects`` would: their namespaces first, and
        a given ``status`` written through ``/status`` afterwards (create ignores it). Consecutive objects of one
        kind (a scenario's nodes) are loaded ``concurrency`` at a time, kinds in their order."""
        objs = [{**o, "metadata": {"namespace": "default", **o["metadata"]}} if o["kind"] in NAMESPACED else o
                for o in objs]
        namespaces = sorted({str(o["metadata"]["namespace"]) for o in objs if o["kind"] in NAMESPACED})
        for namespace in namespaces:
            self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="load") as pool:
            for _, run in itertools.groupby(objs, key=lambda o: o["kind"]):
                list(pool.map(self._load_object, run))

    def _load_object(self, obj: dict[str, Any]) -> None:
        self.apply(obj)
        if obj["kind"] == "Node" and not obj.get("spec", {}).get("taints"):
            # TaintNodesByCondition gave it node.kubernetes.io/not-ready; no node lifecycle controller runs
            # to lift it once KWOK reports the node Ready.
            self.request("PATCH", f"/api/v1/nodes/{obj['metadata']['name']}", {"spec": {"taints": None}},
                         content_type="application/merge-patch+json")
        if obj.get("status"):
            path = f"{collection_path(obj)}/{obj['metadata']['name']}/status"
            code, answer = self.request("PATCH", path, {"status": obj["status"]},
                                        content_type="application/merge-patch+json")
            if code >= 300:
                raise ControlPlaneError(f"status of {obj['kind']} {obj['metadata']['name']}: {code} {answer}")

    def service_account_token(self, component: str, expiration_s: int = 3600) -> str:
        name = chart.component_account(component)
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": expiration_s}}
        code, answer = self.request(
            "POST", f"/api/v1/namespaces/{chart.NAMESPACE}/serviceaccounts/{name}/token", request)
        if code != 201:
            raise ControlPlaneError(f"TokenRequest for {name}: {code} {answer}")
        token: str = answer["status"]["token"]
        return token

    def service_account_kubeconfig(self, component: str) -> Path:
        """A kubeconfig authenticating as the chart's ServiceAccount of ``component`` (connector, binder)."""
        token = self.service_account_token(component)
        path = self._dir / f"{component}.kubeconfig"
        user = f"system:serviceaccount:{chart.NAMESPACE}:{chart.component_account(component)}"
        path.write_text(yaml.safe_dump(kubeconfig(self.url, self.ca_file, token, user)))
        return path


def _decode(payload: bytes) -> dict[str, Any]:
    """A JSON object, or the text of a plain answer (``/readyz`` says ``ok``) as ``{"message": text}``."""
    with contextlib.suppress(ValueError):
        decoded = json.loads(payload or b"{}")
        if isinstance(decoded, dict):
            return decoded
    return {"message": payload.decode(errors="replace")}


def collection_path(obj: dict[str, Any]) -> str:
    """The REST collection of ``obj`` for the kinds the control plane creates itself."""
    api_version: str = obj["apiVersion"]
    plural = {
        "CustomResourceDefinition": "customresourcedefinitions", "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings", "Namespace": "namespaces", "ServiceAccount": "serviceaccounts",
        "Node": "nodes", "Role": "roles", "RoleBinding": "rolebindings", "Pod": "pods",
        "PriorityClass": "priorityclasses", "Queue": "queues", "PodGroup": "podgroups", "Topology": "topologies",
    }[obj["kind"]]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    namespace = obj.get("metadata", {}).get("namespace")
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
