"""`SimCluster`: the store, the simulated kubelets, the recorder and the aiohttp app in one object with a
start/stop lifecycle and a few direct helpers for tests (load, create, get, wait)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from kai_stream.connectors.simcluster import scenario
from kai_stream.connectors.simcluster.claims import ClaimReleaser
from kai_stream.connectors.simcluster.controller import WorkloadController
from kai_stream.connectors.simcluster.kubelet import SimKubelets
from kai_stream.connectors.simcluster.records import BindingRecord, EvictionRecord, Recorder
from kai_stream.connectors.simcluster.resources import ResourceType, by_kind, resolve
from kai_stream.connectors.simcluster.routes import ApiRoutes
from kai_stream.connectors.simcluster.selectors import Selector
from kai_stream.connectors.simcluster.store import Change, Obj, Store
from kai_stream.core.gcpause import settle_heap


class SimCluster:
    """A Kubernetes apiserver + kubelets in-process, served over HTTP on a loopback port.

    time_scale: wall seconds per simulated second for durations and grace periods.
    start_delay: wall seconds from binding to Running.
    termination_grace: simulated seconds a deleted/evicted running pod stays terminating (with
        deletionTimestamp) before it is removed; 0 removes at once; None honours the pod's grace period.
    history_limit: how many changes a watch can resume across; older resourceVersions get 410.
    bookmark_interval: seconds between BOOKMARK events on watches that allow them.
    watch_timeout: how long a watch without timeoutSeconds stays open.
    enforce_capacity: kubelets reject a pod that does not fit in its node's allocatable next to the pods
        running there (phase Failed, reason OutOf<resource>), as a real kubelet does.
    Evicted pods that a controller owns come back pending (``controller.py``); a deleted pod's ResourceClaims are
    released (``claims.py``).
    freeze_gc: on start, move everything alive into the garbage collector's permanent generation
        (`settle_heap`, process-wide). Full collections then scan only what came later; without it, each one
        rescans the imported modules, which shows up as watch-latency tails (figures: benchmarks/README.md).
        Meant for processes that exist to serve (the CLI, benchmarks), off by default for libraries.
    """

    def __init__(
        self,
        *,
        time_scale: float = 1.0,
        start_delay: float = 0.01,
        termination_grace: float | None = 0.0,
        history_limit: int = 100_000,
        bookmark_interval: float = 1.0,
        watch_timeout: float = 1800.0,
        clock: Callable[[], datetime] | None = None,
        freeze_gc: bool = False,
        enforce_capacity: bool = False,
    ) -> None:
        self.freeze_gc = freeze_gc
        self.store = Store(history_limit=history_limit, clock=clock)
        self.kubelets = SimKubelets(self.store, time_scale=time_scale, start_delay=start_delay,
                                    termination_grace=termination_grace, enforce_capacity=enforce_capacity)
        self.recorder = Recorder()
        self.store.add_listener(self.recorder.on_change)
        self.store.add_listener(self._notify)
        self.controller = WorkloadController(self.store)
        self.claims = ClaimReleaser(self.store)
        self.routes = ApiRoutes(self.store, self.kubelets, self.recorder, bookmark_interval=bookmark_interval,
                                watch_timeout=watch_timeout, controller=self.controller)
        self._changed: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0 picks a free port) and return the base URL, e.g. http://127.0.0.1:40123."""
        if self._runner is not None:
            raise RuntimeError("SimCluster already started")
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self.routes.install(app)
        self.routes.closing.clear()
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        self._runner = runner
        bound_host, bound_port = runner.addresses[0][:2]
        self.url = f"http://{bound_host}:{bound_port}"
        self._changed = asyncio.Event()
        self.kubelets.activate()
        if self.freeze_gc:
            settle_heap()
        return self.url

    async def stop(self) -> None:
        self.kubelets.deactivate()
        self.routes.closing.set()
        self.store.wake_watchers()
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None
        self.url = None

    async def __aenter__(self) -> SimCluster:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- loading and direct access -----------------------------------------------------------------------
    def hold_writes(self) -> None:
        """Make every API write (any method but GET) wait until ``release_writes``: lets a caller decide
        when clients' changes (a binder's bindings, evictions, status marks) may happen. Reads go on."""
        self.routes.writes.clear()

    def release_writes(self) -> None:
        self.routes.writes.set()

    def load_objects(self, objs: Iterable[Obj]) -> list[Obj]:
        """Load manifests as a scenario does (kept uid/creationTimestamp; pods with a node start Running)."""
        return scenario.load(self.store, objs)

    def load_scenario_file(self, path: str | Path) -> list[Obj]:
        return scenario.load(self.store, scenario.read_documents(path), str(path))

    async def create(self, obj: Obj) -> Obj:
        """Create through the same store path as a POST (uid, creationTimestamp, defaults, watch events)."""
        rt = by_kind(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if rt is None:
            raise ValueError(f"unsupported apiVersion/kind {obj.get('apiVersion')}/{obj.get('kind')}")
        return self.store.create(rt, obj)

    @staticmethod
    def _ref(ref: str, namespace: str | None, name: str | None) -> tuple[ResourceType, str, str]:
        if name is None:
            parts = ref.split("/")
            ref = parts[0]
            if len(parts) == 3:
                namespace, name = parts[1], parts[2]
            elif len(parts) == 2:
                name = parts[1]
            else:
                raise ValueError(f"expected kind/namespace/name or kind/name, got {ref!r}")
        rt = resolve(ref)
        return rt, (namespace or "default") if rt.namespaced else "", name

    def get(self, ref: str, namespace: str | None = None, name: str | None = None) -> Obj:
        """`get("pods/default/p1")`, `get("Pod", "default", "p1")`, `get("nodes/n1")`; KeyError if absent."""
        rt, ns, nm = self._ref(ref, namespace, name)
        obj = self.store.find(rt, ns, nm)
        if obj is None:
            raise KeyError(f"{rt.key} {ns + '/' if ns else ''}{nm} not found")
        return obj

    def find(self, ref: str, namespace: str | None = None, name: str | None = None) -> Obj | None:
        rt, ns, nm = self._ref(ref, namespace, name)
        return self.store.find(rt, ns, nm)

    def objects(self, kind: str, namespace: str | None = None) -> list[Obj]:
        """All objects of a kind (optionally one namespace), sorted by namespace and name."""
        items, _ = self.store.list_objects(resolve(kind), namespace, Selector())
        return items

    # -- measurements ------------------------------------------------------------------------------------
    @property
    def bindings(self) -> list[BindingRecord]:
        """Every binding POST in arrival order, with its HTTP code and perf_counter timestamps."""
        return self.recorder.bindings

    @property
    def binding_count(self) -> int:
        return self.recorder.binding_count

    @property
    def evictions(self) -> list[EvictionRecord]:
        return self.recorder.evictions

    # -- waiting -----------------------------------------------------------------------------------------
    def _notify(self, change: Change, obj: Obj, old: Obj | None) -> None:
        if self._changed is not None:
            self._changed.set()

    async def wait_until(self, predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Re-check `predicate` after every store change until it is truthy; TimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            if self._changed is not None:
                self._changed.clear()
            value = predicate()
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"condition not met within {timeout} s")
            if self._changed is None:
                self._changed = asyncio.Event()
            try:
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
            except TimeoutError:
                continue
