"""``explain``: one pod's story told from the log alone.

When it arrived, every pending reason the scheduler gave (with the time and the failed predicates) and the
queues' standing as the cycle that gave it left them (deserved, fair share, allocated: the cycle is run again
on the log folded up to the decision's input offset), when and where it was bound, and who evicted it (action,
preemptor, reason, the standing of both queues as the victim search began: folded up to the decision's input
offset, before the cycle; the eviction's details carry the numbers at the decision). Nothing is read from the
log but events and decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from kai_stream.core.config import SchedulerConfig, parse_config
from kai_stream.core.events import (
    BindFailed,
    BindRequested,
    ClusterEvent,
    Decision,
    EvictionFailed,
    EvictionRequested,
    PodBound,
    PodEvicted,
    PodObserved,
    PodPending,
    PodPipelined,
    PodRemoved,
)
from kai_stream.core.scheduler.cycle import plugins_of, run_cycle
from kai_stream.core.scheduler.framework.info import CPU, GPU, MEM, UNIT
from kai_stream.core.scheduler.framework.reuse import open_session
from kai_stream.core.scheduler.framework.session import Session
from kai_stream.core.scheduler.timeshare import queue_usage
from kai_stream.core.state import ClusterState, apply, job_key_of
from kai_stream.history.reader import History, PoolLog

__all__ = ["PodNotFound", "QueueStanding", "Step", "Story", "cycle_standing", "explain_pod", "queue_standing"]

_UNLIMITED = -1
_MB = 10**6


class PodNotFound(LookupError):
    """No pod (or more than one) matches the name given; the message lists candidates."""


@dataclass(frozen=True)
class QueueStanding:
    """One queue at one moment; GPU in devices, CPU in millicores, memory in MB; -1 = unlimited."""

    queue: str
    deserved_gpu: float
    fair_share_gpu: float
    allocated_gpu: float
    requested_gpu: float
    fair_share_cpu: float
    allocated_cpu: float
    fair_share_memory: float
    allocated_memory: float
    usage_gpu: float | None = None
    """Time-based fair share's usage term: the queue's share of the cluster's GPU time over the configured window
    (with its descendants'); None when ``usage_params`` is not configured."""

    @property
    def over_fair_share(self) -> bool:
        return self.allocated_gpu > self.fair_share_gpu + 1e-9

    def as_dict(self) -> dict[str, Any]:
        return {**vars(self), "over_fair_share": self.over_fair_share}


def queue_standing(state: ClusterState, config: SchedulerConfig, pool: str) -> dict[str, QueueStanding]:
    """Every queue's deserved / fair share / allocated / requested in ``pool`` as the core sees ``state``."""
    return _standing(
        open_session(state, config, plugins_of(config), pool=pool, input_offset=state.offset, code_version="")
    )


def cycle_standing(state: ClusterState, config: SchedulerConfig, pool: str) -> dict[str, QueueStanding]:
    """The same table as the cycle on ``state`` left it: the cycle is run again (the core is deterministic, so it
    decides what the log holds) and its closed session read, so a pending reason is shown next to the
    allocations it was given against, those the cycle's own placements and evictions made included."""
    seen: list[dict[str, QueueStanding]] = []
    run_cycle(
        state,
        config,
        pool=pool,
        input_offset=state.offset,
        code_version="",
        reuse=False,
        inspect=lambda session: seen.append(_standing(session)),
    )
    return seen[0]


def _standing(session: Session) -> dict[str, QueueStanding]:
    usage = queue_usage(session.queues, session.usage) if session.config.usage_params is not None else {}
    out: dict[str, QueueStanding] = {}
    for name, q in sorted(session.queues.items()):
        out[name] = QueueStanding(
            queue=name,
            deserved_gpu=q.quota[GPU] / UNIT if q.quota[GPU] != _UNLIMITED else -1.0,
            fair_share_gpu=q.fair_share[GPU] / UNIT,
            allocated_gpu=q.allocated[GPU] / UNIT,
            requested_gpu=q.request[GPU] / UNIT,
            fair_share_cpu=float(q.fair_share[CPU]),
            allocated_cpu=float(q.allocated[CPU]),
            fair_share_memory=q.fair_share[MEM] / _MB,
            allocated_memory=q.allocated[MEM] / _MB,
            usage_gpu=usage[name][GPU] if name in usage else None,
        )
    return out


@dataclass
class Step:
    """One line of the story: a time, what happened, and its data (JSON-ready)."""

    ts: float
    kind: str
    summary: str
    offset: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    standing: dict[str, QueueStanding] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ts": self.ts, "kind": self.kind, "summary": self.summary, "offset": self.offset}
        out["data"] = self.data
        if self.standing is not None:
            out["queues"] = {name: s.as_dict() for name, s in self.standing.items()}
        return out


@dataclass
class Story:
    pod: str
    uid: str
    pool: str
    queue: str
    gpu_milli: int
    steps: list[Step]

    @property
    def status(self) -> str:
        final = {
            "Evicted": "Evicted",
            "EvictionDecided": "Evicting",
            "Bound": "Bound",
            "BindDecided": "Bound",
            "Pending": "Pending",
            "Finished": "Finished",
            "Removed": "Removed",
            "Pipelined": "Pipelined",
        }
        evicted = any(step.kind == "Evicted" for step in self.steps)
        for step in reversed(self.steps):
            if step.kind == "Removed" and evicted:
                return "Evicted"
            if step.kind in final:
                return final[step.kind]
        return "Observed"

    def blocking_queues(self) -> list[str]:
        """Queues over their fair share at the last pending or eviction step (what held the GPUs)."""
        for step in reversed(self.steps):
            if step.standing is not None:
                return [s.queue for s in step.standing.values() if s.over_fair_share and s.queue != self.queue]
        return []

    def as_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "uid": self.uid,
            "pool": self.pool,
            "queue": self.queue,
            "gpu": self.gpu_milli / 1000,
            "status": self.status,
            "blocking_queues": self.blocking_queues(),
            "steps": [s.as_dict() for s in self.steps],
        }


def _configs(log: PoolLog) -> dict[str, SchedulerConfig]:
    out: dict[str, SchedulerConfig] = {}
    for record in log.configs:
        try:
            out[record.config_hash] = parse_config(orjson.loads(record.config), "ConfigRecorded")
        except (ValueError, orjson.JSONDecodeError):
            continue
    return out


def _find(history: History, pod: str) -> list[tuple[str, str]]:
    """(pool, uid) of every pod matching ``namespace/name``, a bare name, or a uid."""
    namespace, _, name = pod.rpartition("/")
    found: dict[tuple[str, str], None] = {}
    for pool, log in sorted(history.pools.items()):
        for event in log.events:
            if isinstance(event, PodObserved) and event.pod.managed:
                p = event.pod
                if p.uid == pod or (p.name == name and (not namespace or p.namespace == namespace)):
                    found[(pool, p.uid)] = None
    return list(found)


def _event_step(event: ClusterEvent, offset: int, first: bool) -> Step | None:
    match event:
        case PodObserved(pod=pod) if first:
            where = f" already on {pod.node_name}" if pod.node_name else ""
            return Step(event.ts, "Arrived", f"created in queue {pod.queue or '(pod group)'}{where}", offset)
        case PodObserved(pod=pod) if pod.phase in ("Succeeded", "Failed"):
            return Step(event.ts, "Finished", f"{pod.phase} on {pod.node_name}", offset)
        case PodBound(node=node, gpu_indices=gpus):
            return Step(event.ts, "Bound", f"bound to {node} (GPUs {list(gpus)}) by the binder", offset, {"node": node})
        case BindFailed(node=node, error=error):
            return Step(event.ts, "BindFailed", f"binding to {node} failed: {error}", offset)
        case PodEvicted():
            return Step(event.ts, "Evicted", "evicted from its node", offset)
        case EvictionFailed(error=error):
            return Step(event.ts, "EvictionFailed", f"eviction failed: {error}", offset)
        case PodRemoved():
            return Step(event.ts, "Removed", "deleted", offset)
    return None


def _queues_by_key(state: ClusterState) -> dict[str, str]:
    """The queue of every pod key and job key: an eviction names its preemptor by job ("ns/podgroup", or
    "ns/pod" for a pod without a group), and a pod in a group may leave its own queue to the group."""
    out = {key: group.queue for key, group in state.pod_groups.items()}
    for pod in state.pods.values():
        job = job_key_of(pod)
        queue = pod.queue or out.get(job, "")
        out.setdefault(job, queue)
        out.setdefault(pod.key, queue)
    return out


def _decision_step(decision: Decision, offset: int | None, pods: dict[str, str]) -> Step:
    data: dict[str, Any] = {"action": decision.action, "input_offset": decision.input_offset}
    match decision:
        case BindRequested(node=node, gpu_indices=gpus):
            data.update(node=node, gpu_indices=list(gpus))
            text = f"{decision.action}: bind to {node} GPUs {list(gpus)}"
            text += f" ({decision.reason})" if decision.reason else ""
            return Step(decision.ts, "BindDecided", text, offset, data)
        case PodPipelined(node=node, waiting_for=waiting):
            data.update(node=node, waiting_for=list(waiting))
            text = f"pipelined to {node}, waiting for {', '.join(waiting)}"
            return Step(decision.ts, "Pipelined", text, offset, data)
        case PodPending(code=code, predicates=predicates, details=details):
            data.update(code=code, reason=decision.reason, predicates=predicates, details=details)
            failed = ", ".join(f"{k} on {v} node(s)" for k, v in sorted(predicates.items()))
            text = f"pending: {code}: {decision.reason}" + (f" [{failed}]" if failed else "")
            return Step(decision.ts, "Pending", text, offset, data)
        case EvictionRequested(preemptor=preemptor, details=details):
            data.update(preemptor=preemptor, preemptor_queue=pods.get(preemptor or ""), reason=decision.reason)
            data.update(details=details)
            by = f" for {preemptor} (queue {pods.get(preemptor or '', '?')})" if preemptor else ""
            text = f"{decision.action}: eviction decided{by}: {decision.reason}"
            return Step(decision.ts, "EvictionDecided", text, offset, data)
    raise TypeError(f"unknown decision type {type(decision).__name__}")


def _story(log: PoolLog, uid: str, fallback: SchedulerConfig | None) -> Story:
    configs = _configs(log)
    state = ClusterState()
    steps: list[Step] = []
    seen_pod = False
    key, queue, gpu = uid, "", 0
    events = list(zip(log.offsets, log.events, strict=True))
    next_event = 0
    after_cycle: dict[tuple[int, str], dict[str, QueueStanding]] = {}

    def fold_until(offset: int) -> None:
        nonlocal next_event, seen_pod, key, queue, gpu
        while next_event < len(events) and events[next_event][0] <= offset:
            at, event = events[next_event]
            if getattr(event, "uid", None) == uid or (isinstance(event, PodObserved) and event.pod.uid == uid):
                if isinstance(event, PodObserved):
                    key, queue, gpu = event.pod.key, event.pod.queue or queue, event.pod.requests.gpu_milli
                step = _event_step(event, at, not seen_pod)
                seen_pod = seen_pod or isinstance(event, PodObserved)
                if step is not None:
                    steps.append(step)
            apply(state, event, at)
            next_event += 1

    for index, decision in enumerate(log.decisions):
        fold_until(decision.input_offset)
        if decision.uid == uid:
            step = _decision_step(decision, log.decision_offsets[index], _queues_by_key(state))
            queue = decision.queue or queue
            if isinstance(decision, PodPending | EvictionRequested):
                config = configs.get(decision.config_hash) or fallback or SchedulerConfig()
                if isinstance(decision, PodPending):
                    cycle = (decision.input_offset, decision.config_hash)
                    if cycle not in after_cycle:
                        after_cycle[cycle] = cycle_standing(state, config, log.pool)
                    step.standing = after_cycle[cycle]
                else:
                    step.standing = queue_standing(state, config, log.pool)
            steps.append(step)
        apply(state, decision)
    fold_until(1 << 62)
    steps.sort(key=lambda s: s.ts)
    return Story(pod=key, uid=uid, pool=log.pool, queue=queue, gpu_milli=gpu, steps=steps)


def explain_pod(history: History, pod: str, *, config: SchedulerConfig | None = None) -> list[Story]:
    """The story of every pod matching ``pod`` (``namespace/name``, a bare name, or a uid), oldest first."""
    matches = _find(history, pod)
    if not matches:
        raise PodNotFound(f"no pod {pod!r} in {history.source}")
    namespaces = {
        e.pod.namespace
        for pool, uid in matches
        for e in history.pools[pool].events
        if isinstance(e, PodObserved) and e.pod.uid == uid
    }
    if "/" not in pod and len(namespaces) > 1:
        raise PodNotFound(f"pod name {pod!r} is in several namespaces: {sorted(namespaces)}; use namespace/name")
    return [_story(history.pools[pool], uid, config) for pool, uid in matches]


def stories_json(stories: Sequence[Story]) -> bytes:
    return orjson.dumps([s.as_dict() for s in stories], option=orjson.OPT_SORT_KEYS)
