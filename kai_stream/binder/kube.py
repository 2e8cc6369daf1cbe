"""The binder's Kubernetes half: apply one action through kubernetes-asyncio, idempotently, with retries.

* Bind (``check_first``, the default, for a decision that may have been applied before): read the pod first;
  if it is already on the decided node that is success (``already=True``), on another node or replaced (uid
  differs) it is ``BindFailed``. Otherwise POST ``pods/binding`` with the uid as precondition and the GPU
  indices as a binding annotation (the apiserver copies binding annotations onto the pod in the same write,
  so nobody ever sees the pod bound without its GPUs). The response is a ``Status`` the client cannot
  deserialize, hence ``_preload_content=False``. 409 is re-checked against the pod: on the decided node it
  is ``already``, else ``BindFailed``. A bound pod's PodGroup loses our ``UnschedulableOnNodePool``
  condition.
* Bind without ``check_first`` (a decision this binder is the first to see): POST at once; the apiserver
  refuses it (409) when the pod is bound, replaced or being deleted and answers 404 when it is gone, and
  only then is the pod read, giving the same outcomes as above with one API call per bind instead of two.
  The PodGroup comes from the decision's job (``namespace/group``); a group named exactly like its only pod
  looks like no group there and is cleared only if this binder marked it.
* A bind carrying DRA devices (``BindRequested.dra_devices``) first writes them to the pod's ResourceClaims
  (``binder.dra``: ``status.allocation`` and ``reservedFor``, idempotently); a claim that cannot take them makes the
  bind ``BindFailed`` with the reason, and the binding is not POSTed. A binding refused after the claims took the
  devices (the pod was bound elsewhere or went away meanwhile) gives them back (``ClaimWriter.release``).
* Before any binding POST the node is checked by the binder's own view (``room.py``: the node's allocatable and
  every pod on it, terminating ones included): a bind onto a node without the room is not POSTed but becomes
  ``BindFailed`` naming what is missing, so a scheduler's mistake cannot over-commit a GPU. With a ``RoomView``
  (``view.py``, what the binder process runs) the view is watched and binds in flight are reserved in it, so the
  check costs no API call; without one the node and its pods are read from the API before each bind.
* Evict: POST ``pods/eviction``; 404 (or a different uid) means the pod is already gone (``already=True``).
  Before it, as kube-scheduler does, the pod gets the status condition ``DisruptionTarget=True`` reason
  ``PreemptionByScheduler`` whose message names the action, the preemptor job and its queue (``disruption``);
  once the eviction is accepted the condition is set again (an apiserver's eviction API replaces it with its
  own ``EvictionByEvictionAPI``) and a core/v1 Event is written on the pod and on its PodGroup (named from the
  decision id, so re-applying a decision writes no second Event). The condition and the Events are logged, not
  raised, when they fail: they explain the eviction, they do not decide it.
* Mark unschedulable (autoscaler signal): pod status condition ``PodScheduled=False`` reason
  ``Unschedulable`` with the pending reason as message (strategic merge on ``/status``, merged by condition
  type), and the PodGroup's ``status.schedulingConditions`` entry ``UnschedulableOnNodePool`` for the pool.
  Skipped when the pod is bound, gone, or already carries the same message.
* 5xx, 429 and connection errors are retried with exponential backoff; other errors are final.

``api_client`` builds the kubernetes-asyncio client every kai-stream component uses (see its docstring).

Outcomes are built by ``kai_stream.emulation.outcomes`` (ids and times from the decision, the one scheme every
emulation uses): the outcome of a decision is the same bytes however often it is applied.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
import orjson
from aiohttp.helpers import get_env_proxy_for_url, netrc_from_env
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential
from yarl import URL

from kai_stream.binder.dra import ClaimWriter
from kai_stream.binder.plan import Action, Bind, Evict, MarkUnschedulable
from kai_stream.binder.room import lacks_room
from kai_stream.binder.view import RoomView
from kai_stream.core.events import BindFailed, BindRequested, EvictionRequested, Outcome, PodPending, stable_id
from kai_stream.core.manifests import ANNOTATION_GPU_INDICES, ANNOTATION_POD_GROUP
from kai_stream.emulation.outcomes import bind_failed, eviction_failed, pod_bound, pod_evicted
from kai_stream.emulation.react import pending_message
from kai_stream.internals import disable_env_lookups
from kai_stream.observability import BINDER_RETRIES

log = logging.getLogger(__name__)

PODGROUP_GROUP = "scheduling.run.ai"
PODGROUP_VERSION = "v2alpha2"
PODGROUP_PLURAL = "podgroups"
UNSCHEDULABLE_ON_NODE_POOL = "UnschedulableOnNodePool"
REASON_UNSCHEDULABLE = "Unschedulable"
MERGE_PATCH = "application/merge-patch+json"
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})

T = TypeVar("T")


def api_client(configuration: client.Configuration) -> client.ApiClient:
    """A kubernetes-asyncio client without the per-request environment lookups when they cannot matter.

    kubernetes-asyncio hard-codes ``trust_env=True`` on its aiohttp session, which makes aiohttp look for a
    netrc file and the proxy variables on every request, each in a worker thread (two thread hops per API call;
    the cost is in benchmarks/README.md). They are looked up once here: when no proxy variable applies to the
    API's address and there is no netrc file, ``trust_env`` is switched off; otherwise the client is left as
    kubernetes-asyncio made it.
    """
    api = client.ApiClient(configuration=configuration)
    session: Any = api.rest_client.pool_manager
    try:
        get_env_proxy_for_url(URL(configuration.host or ""))
    except LookupError:
        if netrc_from_env() is None:
            disable_env_lookups(session)
    return api


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0


DEFAULT_RETRY = RetryPolicy()


class HttpStatusError(Exception):
    """A raw (non-deserialized) API response that was not 2xx."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


def _status(exc: BaseException) -> int | None:
    if isinstance(exc, ApiException):
        return int(exc.status) if exc.status else None
    if isinstance(exc, HttpStatusError):
        return exc.status
    return None


def _retry_reason(exc: BaseException) -> str | None:
    status = _status(exc)
    if status is not None:
        return str(status) if status in RETRYABLE_STATUS else None
    if isinstance(exc, aiohttp.ClientError | ConnectionError | TimeoutError):
        return type(exc).__name__
    return None


def _error_text(exc: BaseException) -> str:
    status = _status(exc)
    if isinstance(exc, ApiException):
        body = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else str(exc.body or exc.reason)
        return f"HTTP {status}: {_status_message(body)}"
    if isinstance(exc, HttpStatusError):
        return f"HTTP {status}: {_status_message(exc.body)}"
    return f"{type(exc).__name__}: {exc}"


def _status_message(body: str) -> str:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:500]
    if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
        return str(parsed["message"])
    return body[:500]


class Pod:
    """The few fields of a pod (raw JSON) that the binder reads."""

    def __init__(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        self.raw = obj
        self.uid: str | None = meta.get("uid")
        self.annotations: dict[str, str] = meta.get("annotations") or {}
        self.deleting = meta.get("deletionTimestamp") is not None
        self.node_name: str | None = spec.get("nodeName") or None
        self.conditions: list[dict[str, Any]] = status.get("conditions") or []

    def condition(self, kind: str) -> dict[str, Any] | None:
        return next((c for c in self.conditions if c.get("type") == kind), None)


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeApplier:
    """Applies binder actions to one Kubernetes API (real or simulated)."""

    def __init__(self, api: client.ApiClient, retry: RetryPolicy = DEFAULT_RETRY, view: RoomView | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.retry = retry
        self.view = view
        self._marked_groups: dict[tuple[str, str], bool] = {}
        self.claims = ClaimWriter(api, self._raw, self._read_pod_raw)

    async def apply(self, action: Action, *, fresh: bool = False) -> Outcome | None:
        """Apply one action; return the outcome to publish (None for autoscaler marks). ``fresh``: no one can have
        applied it before (a bind then skips the read-first check)."""
        if isinstance(action, Bind):
            return await self.bind(action.decision, check_first=not fresh)
        if isinstance(action, Evict):
            return await self.evict(action.decision)
        assert isinstance(action, MarkUnschedulable)
        await self.mark_unschedulable(action.decision)
        return None

    # ------------------------------------------------------------------ retries

    async def _call(self, operation: str, fn: Callable[[], Awaitable[T]]) -> T:
        """``fn`` with at most ``retry.attempts`` tries, backing off, for transient errors only (connection
        errors, 429 and 5xx); any other error (a 404, a 409) or the last try's is raised at once."""

        def count(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            reason = _retry_reason(exc) if exc is not None else None
            BINDER_RETRIES.labels(operation=operation, reason=reason or "unknown").inc()
            log.info("retrying %s after %s (attempt %d)", operation, reason, state.attempt_number)

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retry.attempts),
            wait=wait_exponential(multiplier=self.retry.base_delay_s, max=self.retry.max_delay_s),
            retry=retry_if_exception(lambda exc: _retry_reason(exc) is not None),
            before_sleep=count,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await fn()
        raise AssertionError("unreachable: the last attempt's error is re-raised")

    async def _raw(self, operation: str, fn: Callable[[], Awaitable[Any]]) -> bytes:
        """Call an API method with ``_preload_content=False``; return the 2xx body, raise otherwise."""

        async def once() -> bytes:
            response = await fn()
            try:
                body: bytes = await response.read()
            finally:
                response.release()
            if not 200 <= int(response.status) <= 299:
                raise HttpStatusError(int(response.status), body.decode(errors="replace"))
            return body

        return await self._call(operation, once)

    async def _read_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod as plain JSON (None if absent); skipping the client's model classes keeps binds cheap."""
        try:
            body = await self._raw(
                "get", lambda: self.core.read_namespaced_pod(name, namespace, _preload_content=False)
            )
        except HttpStatusError as exc:
            if exc.status == 404:
                return None
            raise
        return Pod(orjson.loads(body))

    async def _read_pod_raw(self, namespace: str, name: str) -> dict[str, Any] | None:
        pod = await self._read_pod(namespace, name)
        return pod.raw if pod is not None else None

    # ------------------------------------------------------------------ bind

    async def bind(self, decision: BindRequested, *, check_first: bool = True) -> Outcome:
        try:
            if check_first:
                return await self._bind_checked(decision)
            return await self._bind_directly(decision)
        except Exception as exc:  # a final API error becomes a BindFailed the scheduler folds
            return bind_failed(decision, _error_text(exc))

    async def _bind_checked(self, decision: BindRequested) -> Outcome:
        pod = await self._read_pod(decision.namespace, decision.name)
        checked = _check_bindable(decision, pod)
        if checked is not None:
            return checked
        assert pod is not None
        return await self._bind_directly(decision, pod.annotations.get(ANNOTATION_POD_GROUP), pod.raw)

    async def _room(self, decision: BindRequested, own: dict[str, Any] | None) -> str | None:
        """Why the node has no room for the pod by the API's current view (``room.lacks_room``), or None."""
        try:
            node = orjson.loads(
                await self._raw("get", lambda: self.core.read_node(decision.node, _preload_content=False))
            )
        except HttpStatusError as exc:
            if exc.status == 404:
                return f"node {decision.node} not found"
            raise
        listed = orjson.loads(
            await self._raw(
                "list",
                lambda: self.core.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={decision.node}", _preload_content=False
                ),
            )
        )
        on_node = listed.get("items") or []
        refused = lacks_room(decision, node, on_node, own)
        if refused is None:
            return None
        slices = await self._slices(decision.node)
        return lacks_room(decision, node, on_node, own, slices) if slices else refused

    async def _slices(self, node: str) -> list[dict[str, Any]]:
        """The node's DRA ResourceSlices (their GPU devices count as the node's GPUs), read only when
        the node lacks room without them; none where the API does not serve ``resource.k8s.io/v1`` or this account
        may not list them."""
        try:
            listed = orjson.loads(
                await self._raw(
                    "list",
                    lambda: self.custom.list_cluster_custom_object(
                        "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={node}",
                        _preload_content=False,
                    ),
                )
            )
        except HttpStatusError as exc:
            if exc.status in (403, 404):
                return []
            raise
        items = listed.get("items") or []
        return [{**item, "kind": "ResourceSlice", "apiVersion": "resource.k8s.io/v1"} for item in items]

    async def _bind_directly(
        self, decision: BindRequested, group: str | None = None, own: dict[str, Any] | None = None
    ) -> Outcome:
        if self.view is not None:
            await self.view.ready()
            refused = self.view.reserve(decision, own)
            if refused is not None and await self._slices(decision.node):
                refused = await self._room(decision, own)
        else:
            refused = await self._room(decision, own)
        if refused is not None:
            return bind_failed(decision, refused)
        try:
            refused = await self.claims.allocate(decision, own) if decision.dra_devices else _unallocated(decision, own)
            if refused is not None:
                if self.view is not None:
                    self.view.release(decision.uid)
                return bind_failed(decision, refused)
            outcome = await self._post_binding(decision, group)
            if decision.dra_devices and isinstance(outcome, BindFailed):
                await self.claims.release(decision)
            return outcome
        except BaseException:
            if self.view is not None:
                self.view.release(decision.uid)
            raise

    async def _post_binding(self, decision: BindRequested, group: str | None) -> Outcome:
        indices = ",".join(map(str, decision.gpu_indices))
        metadata: dict[str, Any] = {"name": decision.name, "namespace": decision.namespace, "uid": decision.uid}
        if indices:
            metadata["annotations"] = {ANNOTATION_GPU_INDICES: indices}
        # a plain dict is sent as is; the client walks a V1Binding model attribute by attribute to serialize it
        body: Any = {"metadata": metadata, "target": {"apiVersion": "v1", "kind": "Node", "name": decision.node}}
        try:
            await self._raw(
                "bind",
                lambda: self.core.create_namespaced_pod_binding(
                    decision.name, decision.namespace, body, _preload_content=False
                ),
            )
        except HttpStatusError as exc:
            if exc.status not in (404, 409):
                raise
            if self.view is not None:
                self.view.release(decision.uid)
            again = await self._read_pod(decision.namespace, decision.name)
            return _check_bindable(decision, again) or bind_failed(decision, _error_text(exc))
        await self._clear_group_mark(decision, group if group is not None else self._group_of(decision))
        return pod_bound(decision)

    def _group_of(self, decision: BindRequested) -> str | None:
        namespace, _, job = decision.job.partition("/")
        if job and job != decision.name and namespace == decision.namespace:
            return job
        return decision.name if self._marked_groups.get((decision.namespace, decision.name)) else None

    async def _clear_group_mark(self, decision: BindRequested, group: str | None) -> None:
        if not group or self._marked_groups.get((decision.namespace, group)) is False:
            return
        try:
            await self._set_group_condition(decision.namespace, group, decision.pool, None, decision.ts)
        except Exception as exc:
            log.warning("could not clear the PodGroup %s/%s condition: %s", decision.namespace, group, exc)

    # ------------------------------------------------------------------ evict

    async def evict(self, decision: EvictionRequested) -> Outcome:
        try:
            return await self._evict(decision)
        except Exception as exc:
            return eviction_failed(decision, _error_text(exc))

    async def _evict(self, decision: EvictionRequested) -> Outcome:
        pod = await self._read_pod(decision.namespace, decision.name)
        if pod is None or pod.uid != decision.uid:
            return pod_evicted(decision, already=True)
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=decision.name, namespace=decision.namespace),
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=decision.uid)),
        )
        condition = disruption(decision)
        await self._set_disruption(decision, condition)
        try:
            await self._raw(
                "evict",
                lambda: self.core.create_namespaced_pod_eviction(
                    decision.name, decision.namespace, body, _preload_content=False
                ),
            )
        except HttpStatusError as exc:
            if exc.status != 404:
                raise
            return pod_evicted(decision, already=True)
        await self._set_disruption(decision, condition)
        namespace, _, job = decision.job.partition("/")
        lone = namespace != decision.namespace or job == decision.name
        group = pod.annotations.get(ANNOTATION_POD_GROUP) or (None if lone else job)
        await self._record_eviction(decision, group, condition["message"])
        return pod_evicted(decision)

    async def _set_disruption(self, decision: EvictionRequested, condition: dict[str, Any]) -> None:
        """Patch the DisruptionTarget condition onto the pod's status (merged by condition type)."""
        try:
            await self._raw(
                "patch",
                lambda: self.core.patch_namespaced_pod_status(
                    decision.name, decision.namespace, {"status": {"conditions": [condition]}}, _preload_content=False
                ),
            )
        except HttpStatusError as exc:
            if exc.status != 404:
                log.warning("could not set DisruptionTarget on %s/%s: %s", decision.namespace, decision.name, exc)
        except Exception as exc:
            log.warning("could not set DisruptionTarget on %s/%s: %s", decision.namespace, decision.name, exc)

    async def _record_eviction(self, decision: EvictionRequested, group: str | None, message: str) -> None:
        """One Event on the evicted pod and one on its PodGroup (if it has one)."""
        involved = [
            client.V1ObjectReference(
                api_version="v1", kind="Pod", namespace=decision.namespace, name=decision.name, uid=decision.uid
            )
        ]
        if group:
            involved.append(
                client.V1ObjectReference(
                    api_version=f"{PODGROUP_GROUP}/{PODGROUP_VERSION}",
                    kind="PodGroup",
                    namespace=decision.namespace,
                    name=group,
                )
            )
        for target in involved:
            event = eviction_event(decision, target, message)
            try:
                await self._raw(
                    "event",
                    lambda e=event: self.core.create_namespaced_event(  # type: ignore[misc]
                        decision.namespace, e, _preload_content=False
                    ),
                )
            except HttpStatusError as exc:
                if exc.status != 409:
                    log.warning("could not record the eviction of %s/%s: %s", decision.namespace, decision.name, exc)
            except Exception as exc:
                log.warning("could not record the eviction of %s/%s: %s", decision.namespace, decision.name, exc)

    # ------------------------------------------------------------------ autoscaler signal

    async def mark_unschedulable(self, decision: PodPending) -> None:
        """Set PodScheduled=False/Unschedulable on the pod and the PodGroup; errors are logged, not raised."""
        try:
            await self._mark_unschedulable(decision)
        except Exception as exc:
            log.warning("could not mark %s/%s unschedulable: %s", decision.namespace, decision.name, exc)

    async def _mark_unschedulable(self, decision: PodPending) -> None:
        pod = await self._read_pod(decision.namespace, decision.name)
        if pod is None or pod.uid != decision.uid or pod.node_name:
            return
        message = pending_message(decision)
        current = pod.condition("PodScheduled")
        if not (current and current.get("status") == "False" and current.get("message") == message):
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": REASON_UNSCHEDULABLE,
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(decision.ts),
            }
            await self._raw(
                "patch",
                lambda: self.core.patch_namespaced_pod_status(
                    decision.name, decision.namespace, {"status": {"conditions": [condition]}}, _preload_content=False
                ),
            )
        group = pod.annotations.get(ANNOTATION_POD_GROUP)
        if group:
            await self._set_group_condition(decision.namespace, group, decision.pool, message, decision.ts)

    async def _set_group_condition(
        self, namespace: str, group: str, pool: str, message: str | None, ts: float
    ) -> None:
        """Put (message) or remove (None) the UnschedulableOnNodePool condition of ``pool`` on a PodGroup."""
        try:
            current: dict[str, Any] = await self._call(
                "get",
                lambda: self.custom.get_namespaced_custom_object(
                    PODGROUP_GROUP, PODGROUP_VERSION, namespace, PODGROUP_PLURAL, group
                ),
            )
        except ApiException as exc:
            if exc.status == 404:
                self._marked_groups[(namespace, group)] = False
                return
            raise
        conditions: list[dict[str, Any]] = list((current.get("status") or {}).get("schedulingConditions") or [])
        ours = [
            c for c in conditions if c.get("type") == UNSCHEDULABLE_ON_NODE_POOL and c.get("nodePool", "") == pool
        ]
        others = [c for c in conditions if c not in ours]
        if message is None:
            if not ours:
                self._marked_groups[(namespace, group)] = False
                return
            updated = others
        else:
            if ours and ours[-1].get("message") == message and ours[-1].get("status") == "True":
                self._marked_groups[(namespace, group)] = True
                return
            transition = max((int(c.get("transitionID", "0") or 0) for c in conditions), default=-1) + 1
            updated = [
                *others,
                {
                    "type": UNSCHEDULABLE_ON_NODE_POOL,
                    "nodePool": pool,
                    "reason": REASON_UNSCHEDULABLE,
                    "message": message,
                    "status": "True",
                    "transitionID": str(transition),
                    "lastTransitionTime": rfc3339(ts),
                },
            ]
        await self._call(
            "patch",
            lambda: self.custom.patch_namespaced_custom_object_status(
                PODGROUP_GROUP,
                PODGROUP_VERSION,
                namespace,
                PODGROUP_PLURAL,
                group,
                {"status": {"schedulingConditions": updated}},
                _content_type=MERGE_PATCH,  # type: ignore[call-arg]
            ),
        )
        self._marked_groups[(namespace, group)] = message is not None


DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION = "PreemptionByScheduler"
SCHEDULER_COMPONENT = "kai-scheduler"
EVENT_REASONS = {
    "reclaim": "Reclaimed",
    "preempt": "Preempted",
    "consolidation": "Consolidated",
    "stalegangeviction": "StaleGangEvicted",
}


def disruption_message(decision: EvictionRequested) -> str:
    """Who evicted the pod: the action, the preemptor job and its queue, and the scheduler's reason."""
    head = f"{SCHEDULER_COMPONENT}: {decision.action}"
    if decision.preemptor:
        head += f" for {decision.preemptor}"
        if decision.preemptor_queue:
            head += f" (queue {decision.preemptor_queue})"
    return f"{head}: {decision.reason}" if decision.reason else head


def disruption(decision: EvictionRequested) -> dict[str, Any]:
    """The pod condition an eviction sets, as kube-scheduler sets it on its victims."""
    return {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": REASON_PREEMPTION,
        "message": disruption_message(decision),
        "lastTransitionTime": rfc3339(decision.ts),
    }


def eviction_event(decision: EvictionRequested, target: client.V1ObjectReference, message: str) -> client.CoreV1Event:
    """The core/v1 Event telling ``target`` (the pod or its PodGroup) about the eviction; its name derives from the
    decision, so writing it again is a 409, not a second Event."""
    stamp = datetime.fromtimestamp(decision.ts, UTC)
    suffix = stable_id("eviction-event", decision.decision_id, target.kind or "")[:8]
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=f"{target.name}.{suffix}", namespace=decision.namespace),
        involved_object=target,
        reason=EVENT_REASONS.get(decision.action, "Evicted"),
        message=message,
        type="Normal",
        count=1,
        first_timestamp=stamp,
        last_timestamp=stamp,
        source=client.V1EventSource(component=SCHEDULER_COMPONENT),
        reporting_component=SCHEDULER_COMPONENT,
        reporting_instance="kai-stream-binder",
        action="Evict",
    )


def _unallocated(decision: BindRequested, pod: dict[str, Any] | None) -> str | None:
    """Why a bind without DRA devices must not bind a pod known to have DRA claims (None when it may)."""
    claims = ((pod or {}).get("spec") or {}).get("resourceClaims")
    if claims and decision.gpu_indices:
        return (f"pod {decision.namespace}/{decision.name} has DRA claims but the decision allocates no devices to "
                f"them (GPUs {','.join(map(str, decision.gpu_indices))} of {decision.node} are not DRA devices)")
    return None


def _check_bindable(decision: BindRequested, pod: Pod | None) -> Outcome | None:
    """The outcome when the pod's current state already decides it (gone, replaced, bound); else None."""
    if pod is None:
        return bind_failed(decision, f"pod {decision.namespace}/{decision.name} not found", pod_gone=True)
    if pod.uid != decision.uid:
        return bind_failed(decision, f"pod was replaced (uid {pod.uid}, decided for {decision.uid})", pod_gone=True)
    node = pod.node_name
    if node == decision.node:
        return pod_bound(decision, already=True)
    if node:
        return bind_failed(decision, f"pod is already bound to node {node}")
    if pod.deleting:
        return bind_failed(decision, "pod is being deleted")
    return None
