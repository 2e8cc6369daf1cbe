"""NVIDIA's KAI Scheduler, built from the Go module pinned in ``go/go.mod`` and run against the fixture's API server.

``ensure_binaries`` builds the commands (admission webhook, scheduler, binder, pod-grouper, and the pod-group and
queue controllers, which only write statuses and run with ``--controllers``) into ``~/.cache/kai-stream/bin`` with
the fixture's Go caches (``kai_stream.connectors.apiserver.build``): nothing of KAI's source is kept in this repository.
``module_dir`` is the module's copy in the Go module cache, where KAI's CRDs (``deployments/kai-scheduler/crds``)
and its chart's PriorityClasses come from.

``KaiScheduler.prepare`` puts KAI's CRDs in place of the kai-stream chart's and creates KAI's namespaces; ``admit``
starts the admission webhook and registers it with the API server (loopback URL, the fixture's CA; it gives
GPU-fraction pods the annotations the binder needs); ``start`` the other components, all with the admin kubeconfig
and KAI's built-in defaults: the scheduler's default actions and plugins and 1 s cycle, the binder and the
webhook with ``--fake-gpu-nodes``. ``GpuReservationAnnotator`` plays the part of the GPU reservation pod's own
agent: on a real node it writes the GPU it got into the ``run.ai/reserve_for_gpu_index`` annotation, which the
binder waits for before it binds a GPU-fraction pod; under KWOK nobody would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from benchmarks.peer_kai.api import Api
from benchmarks.peer_kai.processes import Processes
from benchmarks.peer_kai.stages import PodTrail
from kai_stream.broker import free_port
from kai_stream.connectors.apiserver import ControlPlane, build

MODULE = Path(__file__).resolve().parent / "go"
KAI = "github.com/NVIDIA/KAI-scheduler"
TOOLS = {
    "admission": build.GoTool("kai-admission", f"{KAI}/cmd/admission", MODULE),
    "scheduler": build.GoTool("kai-scheduler", f"{KAI}/cmd/scheduler", MODULE),
    "binder": build.GoTool("kai-binder", f"{KAI}/cmd/binder", MODULE),
    "podgrouper": build.GoTool("kai-podgrouper", f"{KAI}/cmd/podgrouper", MODULE),
    "podgroupcontroller": build.GoTool("kai-podgroupcontroller", f"{KAI}/cmd/podgroupcontroller", MODULE),
    "queuecontroller": build.GoTool("kai-queuecontroller", f"{KAI}/cmd/queuecontroller", MODULE),
}
CORE = ("admission", "scheduler", "binder", "podgrouper")
CONTROLLERS = ("podgroupcontroller", "queuecontroller")
NAMESPACES = ("kai-scheduler", "kai-resource-reservation", "kai-scale-adjust")
RESERVATION_NAMESPACE = "kai-resource-reservation"
GPU_INDEX_ANNOTATION = "run.ai/reserve_for_gpu_index"


def version() -> str:
    for line in (MODULE / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:2] == ["require", KAI] or parts[:1] == [KAI]:
            return parts[-1]
    raise build.BuildError(f"{MODULE / 'go.mod'} does not require {KAI}")


def ensure_binaries(names: tuple[str, ...] = CORE + CONTROLLERS) -> dict[str, Path]:
    return {name: build.ensure_go_tool(TOOLS[name]) for name in names}


def module_dir() -> Path:
    """KAI's module in the Go module cache (downloaded through the module proxy when missing)."""
    return build.go_module_dir(KAI, MODULE)


def _documents(paths: list[Path]) -> list[dict[str, Any]]:
    return [doc for path in sorted(paths) for doc in yaml.safe_load_all(path.read_text()) if doc]


def crds() -> list[dict[str, Any]]:
    return _documents(list((module_dir() / "deployments" / "kai-scheduler" / "crds").glob("*.yaml")))


def priority_classes() -> list[dict[str, Any]]:
    """KAI's chart installs these (train 50, build-preemptible 75, build 100, inference 125); both schedulers
    get them, the example scenarios name them."""
    templates = module_dir() / "deployments" / "kai-scheduler" / "templates" / "priorityclasses"
    return _documents(list(templates.glob("*.yaml")))


def install_crds(plane: ControlPlane, objs: list[dict[str, Any]], timeout_s: float = 60.0) -> None:
    """Create each CRD, replacing one of the same name (the kai-stream chart's), and wait until it is served."""
    for crd in objs:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
        code, current = plane.request("GET", path)
        if code == 200:
            replacement = {**crd, "metadata": {**crd["metadata"],
                                               "resourceVersion": current["metadata"]["resourceVersion"]}}
            code, answer = plane.request("PUT", path, replacement)
            if code >= 300:
                raise build.BuildError(f"replacing CRD {crd['metadata']['name']}: {code} {answer}")
        else:
            plane.apply(crd)
    deadline = time.monotonic() + timeout_s
    for crd in objs:
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        for served in (v["name"] for v in crd["spec"]["versions"] if v.get("served")):
            while plane.request("GET", f"/apis/{group}/{served}/{plural}")[0] != 200:
                if time.monotonic() > deadline:
                    raise build.BuildError(f"CRD {crd['metadata']['name']} not served after {timeout_s:.0f} s")
                time.sleep(0.2)


def _address() -> str:
    return f"127.0.0.1:{free_port()}"


def register_webhooks(plane: ControlPlane, port: int) -> None:
    """KAI's pod webhooks (mutating on create: GPU-sharing annotations; validating on create and update), served
    by the admission process on loopback with the fixture's serving certificate."""
    ca_bundle = base64.b64encode(plane.ca_file.read_bytes()).decode()
    rules = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
    common = {"sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Fail"}
    for kind, path, operations, extra in (
        ("MutatingWebhookConfiguration", "mutate--v1-pod", ["CREATE"], {"reinvocationPolicy": "IfNeeded"}),
        ("ValidatingWebhookConfiguration", "validate--v1-pod", ["CREATE", "UPDATE"], {}),
    ):
        webhook = {"name": "admission.run.ai", **common, **extra,
                   "clientConfig": {"url": f"https://127.0.0.1:{port}/{path}", "caBundle": ca_bundle},
                   "rules": [{**rules, "operations": operations}]}
        obj = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
               "metadata": {"name": "kai-admission"}, "webhooks": [webhook]}
        code, answer = plane.request("POST", f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s", obj)
        if code >= 300:
            raise build.BuildError(f"registering {kind}: {code} {answer}")


class KaiScheduler:
    """KAI's components as processes against ``plane`` (admin credentials)."""

    name = "KAI Scheduler"

    def __init__(self, logdir: Path, controllers: bool = False) -> None:
        self.components = CORE + (CONTROLLERS if controllers else ())
        self.processes = Processes(logdir)
        self.scheduler_component = "scheduler"

    def prepare(self, plane: ControlPlane) -> None:
        install_crds(plane, crds())
        for namespace in NAMESPACES:
            plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

    async def admit(self, plane: ControlPlane) -> None:
        """The admission webhook, registered with the API server: pods created from now on pass through it."""
        binary = (await asyncio.to_thread(ensure_binaries, ("admission",)))["admission"]
        webhook_port, probe = free_port(), _address()
        certs = self.processes.logdir / "webhook-tmp"
        serving = certs / "k8s-webhook-server" / "serving-certs"
        serving.mkdir(parents=True, exist_ok=True)
        shutil.copy(plane.ca_file.parent / "serving.crt", serving / "tls.crt")
        shutil.copy(plane.ca_file.parent / "serving.key", serving / "tls.key")
        self.processes.spawn("admission", [
            str(binary), f"--webhook-addr={webhook_port}", "--gpu-sharing-enabled=true",
            "--fake-gpu-nodes=true", "--gpu-pod-runtime-class-name=", f"--metrics-bind-address={_address()}",
            f"--health-probe-bind-address={probe}"], env={"KUBECONFIG": str(plane.kubeconfig), "TMPDIR": str(certs)})
        await self._until_ready(f"http://{probe}/readyz")
        await asyncio.to_thread(register_webhooks, plane, webhook_port)

    async def start(self, plane: ControlPlane) -> None:
        binaries = await asyncio.to_thread(ensure_binaries, self.components)
        argv = {
            "scheduler": ["--schedule-period=1s", f"--listen-address={_address()}",
                          f"--plugin-server-port={free_port()}", "--v=2"],
            "binder": ["--fake-gpu-nodes=true", f"--metrics-bind-address={_address()}",
                       f"--health-probe-bind-address={_address()}"],
            "podgrouper": [f"--metrics-bind-address={_address()}", f"--health-probe-bind-address={_address()}"],
            "podgroupcontroller": ["--enable-webhook=false", f"--metrics-bind-address={_address()}",
                                   f"--health-probe-bind-address={_address()}"],
            "queuecontroller": ["--enable-webhook=false", f"--metrics-listen-address={_address()}"],
        }
        for name in self.components:
            if name != "admission":
                self.processes.spawn(name, [str(binaries[name]), *argv[name]],
                                     env={"KUBECONFIG": str(plane.kubeconfig)})

    async def _until_ready(self, url: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self.processes.check()
            with contextlib.suppress(OSError):
                async with aiohttp.ClientSession() as session, session.get(url) as response:
                    if response.status == 200:
                        return
            if time.monotonic() > deadline:
                raise TimeoutError(f"KAI admission not ready at {url} after {timeout_s:.0f} s")
            await asyncio.sleep(0.2)

    def side_tasks(self, api: Api) -> list[Coroutine[Any, Any, None]]:
        return [GpuReservationAnnotator(api).run()]

    async def trails(self, names: set[str]) -> dict[str, PodTrail]:
        """KAI keeps no log of its decisions to read back."""
        return {}

    def stop(self) -> None:
        self.processes.stop()


class GpuReservationAnnotator:
    """Writes a GPU index onto each of KAI's GPU reservation pods once bound, as the pod itself would on a node."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.annotated: set[str] = set()
        self._pending: set[asyncio.Task[Any]] = set()

    def handle(self, event: str, pod: dict[str, Any], at: float) -> None:
        meta = pod["metadata"]
        if event == "DELETED" or meta["name"] in self.annotated or not (pod.get("spec") or {}).get("nodeName"):
            return
        if GPU_INDEX_ANNOTATION in (meta.get("annotations") or {}):
            return
        self.annotated.add(meta["name"])
        patch = {"metadata": {"annotations": {GPU_INDEX_ANNOTATION: f"GPU-{meta['uid']}"}}}
        task = asyncio.create_task(self.api.request(
            "PATCH", f"/api/v1/namespaces/{RESERVATION_NAMESPACE}/pods/{meta['name']}", patch,
            content_type="application/merge-patch+json"))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def run(self) -> None:
        await self.api.watch(f"/api/v1/namespaces/{RESERVATION_NAMESPACE}/pods", self.handle)
