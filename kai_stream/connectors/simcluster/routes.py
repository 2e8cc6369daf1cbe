"""aiohttp handlers for the Kubernetes REST paths: discovery, CRUD, list (with paging) and watch,
patch, the `/status`, `/binding` and `/eviction` subresources, and `Status` bodies for every error."""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from kai_stream.connectors.simcluster import patch, resources
from kai_stream.connectors.simcluster.controller import WorkloadController
from kai_stream.connectors.simcluster.errors import ApiError, conflict, not_found, status_body
from kai_stream.connectors.simcluster.kubelet import SimKubelets
from kai_stream.connectors.simcluster.records import Recorder
from kai_stream.connectors.simcluster.resources import ResourceType
from kai_stream.connectors.simcluster.rules import INTERNAL
from kai_stream.connectors.simcluster.selectors import parse as parse_selector
from kai_stream.connectors.simcluster.store import Obj, Store, rfc3339
from kai_stream.connectors.simcluster.watchstream import WatchParams, stream

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
VERSION_INFO = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-kai-stream-sim", "gitCommit": "simulated",
                "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "python",
                "compiler": "aiohttp", "platform": "linux/amd64"}
_PAGE_SNAPSHOTS = 64


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


@dataclass(frozen=True)
class Target:
    resource: ResourceType
    namespace: str | None
    name: str | None
    sub: str


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


def _int_param(query: Any, name: str) -> int | None:
    raw = query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise ApiError(400, f"invalid value for {name}: {raw!r} (want an integer)") from None


NOT_FOUND_PATH = "the server could not find the requested resource"


def parse_target(group: str, version: str, segments: list[str]) -> Target:
    """`[namespaces/NS/]PLURAL[/NAME[/SUB]]` -> Target; namespaces' own subresources are recognised."""
    namespace: str | None = None
    namespace_subresource = not group and len(segments) == 3 and segments[2] in ("status", "finalize")
    if segments[:1] == ["namespaces"] and len(segments) >= 3 and not namespace_subresource:
        namespace, segments = segments[1], segments[2:]
    if not segments or len(segments) > 3:
        raise ApiError(404, NOT_FOUND_PATH)
    rt = resources.by_path(group, version, segments[0])
    if rt is None:
        raise ApiError(404, NOT_FOUND_PATH)
    if namespace is not None and not rt.namespaced:
        raise ApiError(404, NOT_FOUND_PATH)
    name = segments[1] if len(segments) > 1 else None
    sub = segments[2] if len(segments) > 2 else ""
    if sub and sub not in rt.subresources:
        raise ApiError(404, NOT_FOUND_PATH)
    return Target(rt, namespace, name, sub)


class ApiRoutes:
    def __init__(self, store: Store, kubelets: SimKubelets, recorder: Recorder, *, bookmark_interval: float,
                 watch_timeout: float, controller: WorkloadController | None = None) -> None:
        self.store = store
        self.controller = controller
        self.writes = asyncio.Event()
        self.writes.set()
        self.kubelets = kubelets
        self.recorder = recorder
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.closing = asyncio.Event()
        self._pages: OrderedDict[str, list[bytes]] = OrderedDict()

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self._errors)
        for path, handler in (
            ("/version", self._version),
            ("/healthz", self._healthy),
            ("/livez", self._healthy),
            ("/readyz", self._healthy),
            ("/api", self._api_versions),
            ("/apis", self._api_groups),
        ):
            app.router.add_get(path, handler)
            app.router.add_get(path + "/", handler)
        app.router.add_get("/debug/simcluster/bindings", self._bindings_report)
        app.router.add_route("*", "/api/{tail:.+}", self._core)
        app.router.add_route("*", "/apis/{tail:.+}", self._grouped)

    @staticmethod
    async def _version(request: web.Request) -> web.Response:
        return json_response(VERSION_INFO)

    @staticmethod
    async def _healthy(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    @staticmethod
    async def _api_groups(request: web.Request) -> web.Response:
        return json_response(resources.api_group_list())

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            return json_response(err.status(), err.code)
        except web.HTTPException as exc:
            if exc.status >= 400:
                return json_response(status_body(exc.status, exc.reason.replace(" ", ""), NOT_FOUND_PATH
                                                 if exc.status == 404 else exc.reason), exc.status)
            raise
        except orjson.JSONDecodeError as err:
            return json_response(status_body(400, "BadRequest", f"request body is not valid JSON: {err}"), 400)
        except Exception as err:
            log.exception("simcluster: %s %s failed", request.method, request.path)
            return json_response(status_body(500, "InternalError", f"{type(err).__name__}: {err}"), 500)

    async def _bindings_report(self, request: web.Request) -> web.Response:
        return json_response(self.recorder.report())

    async def _api_versions(self, request: web.Request) -> web.Response:
        return json_response(resources.api_versions(request.host))

    async def _core(self, request: web.Request) -> web.StreamResponse:
        segments = [s for s in request.match_info["tail"].split("/") if s]
        if segments[0] != "v1":
            raise ApiError(404, NOT_FOUND_PATH)
        if len(segments) == 1:
            return json_response(resources.api_resource_list("", "v1"))
        return await self._dispatch(request, parse_target("", "v1", segments[1:]))

    async def _grouped(self, request: web.Request) -> web.StreamResponse:
        segments = [s for s in request.match_info["tail"].split("/") if s]
        if len(segments) == 1:
            doc = resources.api_group(segments[0])
        elif len(segments) == 2:
            doc = resources.api_resource_list(segments[0], segments[1])
        else:
            return await self._dispatch(request, parse_target(segments[0], segments[1], segments[2:]))
        if doc is None:
            raise ApiError(404, NOT_FOUND_PATH)
        return json_response(doc)

    async def _dispatch(self, request: web.Request, t: Target) -> web.StreamResponse:
        if request.query.get("dryRun"):
            raise ApiError(400, "dryRun is not supported by the simulated cluster")
        method = request.method
        if method != "GET":
            await self.writes.wait()
        if t.name is None:
            if method == "GET":
                if _flag(request.query.get("watch")):
                    return await self._watch(request, t)
                return self._list(request, t)
            if t.resource.namespaced and t.namespace is None:
                raise ApiError(405, f"{method} is not supported on {t.resource.plural} across all namespaces")
            if method == "POST":
                return self._create(await self._body(request), t)
            if method == "DELETE":
                return self._delete_collection(request, t)
            raise ApiError(405, f"{method} is not supported on a collection")
        if t.resource.namespaced and t.namespace is None:
            raise ApiError(404, NOT_FOUND_PATH)
        ns = t.namespace or ""
        if t.sub == "binding":
            return self._bind(await self._body(request), t, method)
        if t.sub == "eviction":
            return self._evict(await self._body(request), t, method)
        if method == "GET":
            return json_response(self.store.get(t.resource, ns, t.name))
        if method == "PUT":
            body = self._check_kind(await self._body(request), t.resource)
            return json_response(self.store.replace(t.resource, ns, t.name, body, subresource=t.sub))
        if method == "PATCH":
            return await self._patch(request, t)
        if method == "DELETE" and not t.sub:
            return await self._delete(request, t)
        raise ApiError(405, f"{method} is not supported here")

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return {}
        return orjson.loads(raw)

    # -- list / watch ------------------------------------------------------------------------------------
    def _selector(self, request: web.Request, rt: ResourceType) -> Any:
        return parse_selector(request.query.get("labelSelector"), request.query.get("fieldSelector"), rt.field_labels)

    def _list(self, request: web.Request, t: Target) -> web.Response:
        rt = t.resource
        limit = _int_param(request.query, "limit") or 0
        token = request.query.get("continue")
        if token:
            page_id, offset, rv = self._decode_continue(token)
            items = self._pages.get(page_id)
            if items is None:
                raise ApiError(410, "The provided continue parameter is too old to display a consistent list "
                               "result. You can start a new list without the continue parameter.", reason="Expired")
        else:
            items, rv = self.store.list_raw(rt, t.namespace, self._selector(request, rt))
            page_id, offset = "", 0
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit > 0 and len(items) - offset > limit:
            if not page_id:
                page_id = uuid.uuid4().hex
                self._pages[page_id] = items
                while len(self._pages) > _PAGE_SNAPSHOTS:
                    self._pages.popitem(last=False)
            meta["continue"] = self._encode_continue(page_id, offset + limit, rv)
            meta["remainingItemCount"] = len(items) - offset - limit
            page = items[offset:offset + limit]
        else:
            page = items[offset:]
        head = orjson.dumps({"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta})
        body = head[:-1] + b',"items":[' + b",".join(page) + b"]}"
        return web.Response(body=body, status=200, content_type="application/json")

    @staticmethod
    def _encode_continue(page_id: str, offset: int, rv: int) -> str:
        return base64.urlsafe_b64encode(orjson.dumps({"id": page_id, "offset": offset, "rv": rv})).decode()

    def _decode_continue(self, token: str) -> tuple[str, int, int]:
        try:
            data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
            return str(data["id"]), int(data["offset"]), int(data["rv"])
        except (ValueError, KeyError, TypeError):
            raise ApiError(400, f"invalid continue token {token!r}") from None

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        raw_rv = q.get("resourceVersion") or ""
        initial = _flag(q.get("sendInitialEvents"))
        try:
            since = None if raw_rv in ("", "0") or initial else int(raw_rv)
        except ValueError:
            raise ApiError(400, f"invalid resourceVersion {raw_rv!r}") from None
        timeout = _int_param(q, "timeoutSeconds")
        params = WatchParams(
            since=since,
            timeout=float(timeout) if timeout is not None else self.watch_timeout,
            bookmarks=_flag(q.get("allowWatchBookmarks")),
            initial_events_end=initial,
        )
        selector = self._selector(request, t.resource)
        return await stream(request, self.store, t.resource, t.namespace, selector, params,
                            bookmark_interval=self.bookmark_interval, closing=self.closing)

    # -- writes ------------------------------------------------------------------------------------------
    def _check_kind(self, body: Any, rt: ResourceType) -> Obj:
        if not isinstance(body, dict):
            raise ApiError(400, f"the request body must be a {rt.kind} object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != rt.api_version:
            raise ApiError(400, f"the API version in the data ({api_version}) does not match the expected API "
                           f"version ({rt.api_version})")
        if kind and kind != rt.kind:
            raise ApiError(400, f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        return body

    def _create(self, body: Any, t: Target) -> web.Response:
        obj = self._check_kind(body, t.resource)
        meta = obj.setdefault("metadata", {})
        if t.namespace is not None:
            if meta.get("namespace") not in (None, "", t.namespace):
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on "
                               "the request")
            meta["namespace"] = t.namespace
        return json_response(self.store.create(t.resource, obj), 201)

    async def _patch(self, request: web.Request, t: Target) -> web.Response:
        content_type = request.headers.get("Content-Type", "")
        body = await self._body(request)
        builtin = t.resource.builtin

        def change(current: Obj) -> Obj:
            return patch.apply(content_type, current, body, builtin=builtin)

        return json_response(self.store.mutate(t.resource, t.namespace or "", t.name or "", change,
                                               subresource=t.sub))

    def _grace(self, pod: Obj, requested: int | None) -> float:
        if requested is None:
            requested = int(pod.get("spec", {}).get("terminationGracePeriodSeconds", 30))
        if requested <= 0:
            return 0.0
        configured = self.kubelets.termination_grace
        return float(requested) if configured is None else configured

    async def _delete(self, request: web.Request, t: Target) -> web.Response:
        body = await self._body(request)
        options = body if isinstance(body, dict) else {}
        requested = _int_param(request.query, "gracePeriodSeconds")
        if requested is None and options.get("gracePeriodSeconds") is not None:
            requested = int(options["gracePeriodSeconds"])
        rt, ns, name = t.resource, t.namespace or "", t.name or ""
        current = self.store.get(rt, ns, name)
        grace = self._grace(current, requested) if rt.key == "pods" else 0.0
        result = self.store.delete(rt, ns, name, grace_seconds=grace, preconditions=options.get("preconditions"))
        if rt.key == "pods" or rt.key == "namespaces":
            return json_response(result)
        details = {"name": name, "kind": rt.plural, "uid": result["metadata"].get("uid", "")}
        if rt.group:
            details["group"] = rt.group
        return json_response(status_body(200, "", "", success=True, details=details))

    def _delete_collection(self, request: web.Request, t: Target) -> web.Response:
        rt = t.resource
        items, _ = self.store.list_objects(rt, t.namespace, self._selector(request, rt))
        requested = _int_param(request.query, "gracePeriodSeconds")
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            grace = self._grace(obj, requested) if rt.key == "pods" else 0.0
            deleted.append(self.store.delete(rt, meta.get("namespace", ""), meta["name"], grace_seconds=grace))
        body = {"kind": f"{rt.kind}List", "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self.store.resource_version)}, "items": deleted}
        return json_response(body)

    # -- subresources --------------------------------------------------------------------------------------
    def _bind(self, body: Any, t: Target, method: str) -> web.Response:
        if method != "POST":
            raise ApiError(405, "pods/binding only supports POST (create)")
        ns, name = t.namespace or "", t.name or ""
        target = body.get("target") if isinstance(body, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        try:
            if not node:
                raise ApiError(422, f'Binding "{name}" is invalid: target.name: Required value')
            if isinstance(target, dict) and target.get("kind", "Node") != "Node":
                raise ApiError(422, f'Binding "{name}" is invalid: target.kind: must be "Node"')
            self._assign(ns, name, node, body)
        except ApiError as err:
            self.recorder.binding(ns, name, node or "", err.code)
            raise
        self.recorder.binding(ns, name, node, 201)
        return json_response(status_body(201, "", "", success=True), 201)

    def _assign(self, ns: str, name: str, node: str, binding: Obj) -> Obj:
        pods = resources.by_key("pods")
        pod = self.store.find(pods, ns, name)
        if pod is None:
            raise not_found("pods", name)
        want_uid = (binding.get("metadata") or {}).get("uid")
        if want_uid and want_uid != pod["metadata"].get("uid"):
            raise conflict("pods/binding", name, f"Precondition failed: UID in precondition: {want_uid}, UID in "
                           f"object meta: {pod['metadata'].get('uid')}")
        if pod["metadata"].get("deletionTimestamp"):
            raise conflict("pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host")
        current = pod.get("spec", {}).get("nodeName")
        if current:
            raise conflict("pods/binding", name, f'pod {name} is already assigned to node "{current}"')
        extra = (binding.get("metadata") or {}).get("annotations") or {}
        at = self.store.now()

        def change(p: Obj) -> Obj:
            p.setdefault("spec", {})["nodeName"] = node
            if extra:
                p["metadata"]["annotations"] = {**(p["metadata"].get("annotations") or {}), **extra}
            status = p.setdefault("status", {})
            conditions = [c for c in status.get("conditions", []) if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": rfc3339(at)})
            status["conditions"] = conditions
            return p

        return self.store.mutate(pods, ns, name, change, subresource=INTERNAL)

    def _evict(self, body: Any, t: Target, method: str) -> web.Response:
        if method != "POST":
            raise ApiError(405, "pods/eviction only supports POST (create)")
        ns, name = t.namespace or "", t.name or ""
        try:
            if not isinstance(body, dict):
                raise ApiError(400, "the request body must be an Eviction object")
            evict_name = (body.get("metadata") or {}).get("name")
            if evict_name and evict_name != name:
                raise ApiError(400, f"name in URL does not match name in Eviction object: {name} != {evict_name}")
            pods = resources.by_key("pods")
            pod = self.store.get(pods, ns, name)
            options = body.get("deleteOptions") or {}
            requested = options.get("gracePeriodSeconds")
            grace = self._grace(pod, None if requested is None else int(requested))
            if not pod["metadata"].get("deletionTimestamp"):
                if self.controller is not None:
                    self.controller.evicted(pod)
                self.store.delete(pods, ns, name, grace_seconds=grace, preconditions=options.get("preconditions"))
        except ApiError as err:
            self.recorder.eviction(ns, name, err.code)
            raise
        self.recorder.eviction(ns, name, 201)
        return json_response(status_body(201, "", "", success=True), 201)
