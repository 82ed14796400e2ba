"""Incident -> `events.k8s.io/v1` Event body and pod annotation (pure functions).

Reasons are oomwatch's own so they never collide with kubelet's (`OOMKilling`, `Evicted`,
`SystemOOM`).  The note is the one line a person reads in `kubectl get events`: who was
killed, which limit, how full it was, what filled it, and whether the container lived.
Every untrusted string (process and cgroup names, pod status messages) is escaped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from oomwatch.fleet.summary import (
    REPORTING_CONTROLLER,
    SUMMARY_ANNOTATION,
    kill_summary,
    workload_name,
)
from oomwatch.incident import Incident
from oomwatch.kube.pods import PodInfo
from oomwatch.sanitize import escape_control

ANNOTATION_KEY = "oomwatch.io/last-oom-kill"
NODE_EVENT_NAMESPACE = "default"  # the API server puts cluster-scoped objects' Events here
NOTE_MAX_BYTES = 1024  # the API server's limit is on the UTF-8 bytes (Go len)

REASON_CONTAINER = "OOMKillDetected"
REASON_CHILD = "ChildProcessOOMKilled"
REASON_GROUP = "GroupOOMKill"
REASON_POD_LIMIT = "PodLimitOOMKill"
REASON_NODE = "NodeOOMKill"
REASON_CUDA = "CUDAOutOfMemory"
REASON_FRAMEWORK = "FrameworkOutOfMemory"  # a framework OOM off the GPU (TensorFlow on CPU:0)
REASON_EVICTION = "MemoryPressureEviction"
REASON_FALSE_OOMKILLED = "OOMKilledWithoutKernelKill"

_SCOPE_TEXT = {
    "container": "the container memory limit",
    "pod": "the pod memory limit",
    "qos": "the QoS-class cgroup limit (node allocatable)",
    "node": "the kubepods limit (node allocatable)",
    "cgroup": "a cgroup limit",
    "global": "node memory (global OOM)",
}


@dataclass(frozen=True, slots=True)
class EventDraft:
    """A ready Event body plus the key that groups repeats into one series."""

    namespace: str
    body: dict[str, Any]
    series_key: tuple[str, ...]
    container: str | None  # the killed container, as the API names it

    @property
    def name(self) -> str:
        name: str = self.body["metadata"]["name"]
        return name


def event_reason(incident: Incident) -> str:
    """The Event reason for an incident (most specific first)."""
    if incident.kind == "framework":
        return REASON_CUDA if _on_cuda_device(incident.allocator or {}) else REASON_FRAMEWORK
    if incident.kind == "eviction":
        return REASON_EVICTION
    if incident.kind == "false_oomkilled":
        return REASON_FALSE_OOMKILLED
    if incident.kind == "global" or incident.limit_scope in ("global", "node", "qos"):
        return REASON_NODE
    if incident.group_kill:
        return REASON_GROUP
    if incident.limit_scope == "pod":
        return REASON_POD_LIMIT
    if incident.container_survived:
        return REASON_CHILD
    return REASON_CONTAINER


def _on_cuda_device(allocator: dict[str, Any]) -> bool:
    """PyTorch's CUDA allocator OOMs only on a CUDA device (its message may omit the number);
    TensorFlow names the device (`GPU:0`, `CPU:0`; oomwatch.probe.oom_messages)."""
    if allocator.get("framework") == "torch-cuda":
        return True
    device = allocator.get("device")
    return isinstance(device, str) and device.upper().startswith(("GPU", "CUDA"))


def _action(incident: Incident) -> str:
    return {
        "framework": "OutOfMemory",
        "eviction": "Evicted",
        "false_oomkilled": "Verified",
    }.get(incident.kind, "Killed")


def build_event(
    incident: Incident, node_name: str, now: datetime, pod: PodInfo | None
) -> EventDraft | None:
    """The Event for one incident, or None when it concerns neither a known pod nor the node.

    `pod` is the API's pod for `incident.pod_uid` (from the cache), and the only source of
    the object the Event regards: names in `incident.k8s` may come from a pod-written probe
    file, and must never aim an Event at another pod.  A kill in a pod's cgroup goes on the
    pod (its container in `fieldPath`); a global OOM with no pod victim goes on the Node;
    anything else (a system service's memcg, a pod the API does not show) gets no Event —
    it is still logged, counted and stored.
    """
    reason = event_reason(incident)
    container = _container_name(incident, pod)
    if pod is not None and incident.pod_uid:
        regarding = regarding_pod(pod, container)
        namespace, object_name = pod.namespace, pod.name
        workload = workload_name(pod.owner_kind, pod.owner_name, pod.name)
    elif reason == REASON_NODE and incident.pod_uid is None:
        regarding = {"apiVersion": "v1", "kind": "Node", "name": node_name}
        namespace, object_name = NODE_EVENT_NAMESPACE, node_name
        workload = f"Node/{node_name}"
    else:
        return None
    digest = hashlib.sha256(f"{incident.identity_key()}\x1f{reason}".encode()).hexdigest()[:16]
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": f"{object_name[:236]}.{digest}",
            "namespace": namespace,
            # The diagnosis as data, for `kubectl oomwatch top` (oomwatch.fleet.summary).
            "annotations": {
                SUMMARY_ANNOTATION: kill_summary(incident, workload, container, reason)
            },
        },
        "eventTime": micro_time(now),
        "type": "Warning",
        "reason": reason,
        "action": _action(incident),
        "note": event_note(incident, container),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": f"oomwatch-{node_name}"[:128],
        "regarding": regarding,
    }
    key = (
        namespace,
        regarding["kind"],
        object_name,
        str(regarding.get("uid", "")),
        container or "",
        reason,
    )
    return EventDraft(namespace=namespace, body=body, series_key=key, container=container)


def _container_name(incident: Incident, pod: PodInfo | None) -> str | None:
    """The killed container's name as the API knows it (by ID, else a name it confirms)."""
    if pod is None:
        return None
    if incident.container_id:
        by_id = pod.container_by_id(incident.container_id)
        if by_id is not None:
            return by_id.name
    claimed = incident.k8s.container if incident.k8s else None
    return claimed if claimed and pod.container_by_name(claimed) else None


_SPEC_LIST = {"app": "containers", "init": "initContainers", "ephemeral": "ephemeralContainers"}


def regarding_pod(pod: PodInfo, container: str | None) -> dict[str, Any]:
    """An Event's reference to the pod, its container in `fieldPath`."""
    regarding: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": pod.namespace,
        "name": pod.name,
        "uid": pod.uid,
    }
    if container:
        regarding["fieldPath"] = _field_path(pod, container)
    return regarding


def _field_path(pod: PodInfo, container: str) -> str:
    """`spec.containers{app}` (or initContainers/ephemeralContainers), as kubelet writes it."""
    info = pod.container_by_name(container)
    return f"spec.{_SPEC_LIST[info.role if info else 'app']}{{{container}}}"


def micro_time(at: datetime) -> str:
    """RFC 3339 with microseconds in UTC, the wire form of `MicroTime`."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_note(incident: Incident, container: str | None) -> str:
    """One line for `kubectl get events`: victim, limit and usage, dominant memory, survival."""
    parts: list[str] = []
    if incident.kind == "framework" and incident.allocator:
        parts.append(_framework_text(incident.allocator, container))
    elif incident.kind in ("eviction", "false_oomkilled", "framework"):
        parts.extend(f.message for f in incident.findings[:1])
        if not parts:
            parts.append(f"{incident.kind} incident")
    else:
        parts.append(_victim_text(incident, container))
        usage = _usage_text(incident)
        if usage:
            parts.append(usage)
        dominant = _dominant_text(incident)
        if dominant:
            parts.append(dominant)
        if incident.container_survived is True:
            parts.append("container survived (still running; Kubernetes shows nothing)")
        elif incident.container_survived is False:
            parts.append("container was killed")
        if incident.header_suppressed or incident.kmsg_missing:
            parts.append("kernel report was rate-limited: details partial")
    return clip_utf8(escape_control("; ".join(parts)), NOTE_MAX_BYTES)


def clip_utf8(text: str, max_bytes: int) -> str:
    """`text`, or its longest prefix ending "..." whose UTF-8 fits `max_bytes` (whole chars).

    A lone surrogate (undecodable input) becomes "?", so the count is what goes on the wire.
    """
    encoded = text.encode(errors="replace")
    if len(encoded) > max_bytes:
        encoded = encoded[: max_bytes - 3] + b"..."
    return encoded.decode(errors="ignore")


def _framework_text(allocator: dict[str, Any], container: str | None) -> str:
    """The probe's allocator facts: what was asked for, what was free, where in training."""
    framework = allocator.get("framework") or "framework"
    device = allocator.get("device")
    text = f"{framework} out of memory" + (f" on {device}" if device else "")
    if container:
        text += f" in container {container}"
    figures = [
        f"{label} {_mib(value)}"
        for label, key in (
            ("tried to allocate", "requested_bytes"),
            ("free", "free_bytes"),
            ("total", "total_bytes"),
            ("allocated", "allocated_bytes"),
            ("reserved but unallocated", "reserved_unallocated_bytes"),
        )
        if isinstance(value := allocator.get(key), int)
    ]
    where = [
        f"{key} {allocator[key]}"
        for key in ("phase", "epoch", "step", "batch_size")
        if allocator.get(key) is not None
    ]
    return ", ".join([text + (": " + ", ".join(figures) if figures else ""), *where])


def _victim_text(incident: Incident, container: str | None) -> str:
    scope = _SCOPE_TEXT.get(incident.limit_scope or "", "a memory limit")
    where = f" in container {container}" if container else ""
    victims = incident.victims
    if incident.group_kill:
        names = ", ".join(f"{v.comm} (pid {v.pid})" for v in victims[:5])
        more = f" and {len(victims) - 5} more" if len(victims) > 5 else ""
        return (
            f"memory.oom.group killed all {len(victims)} processes{where} at {scope}: "
            f"{names}{more}"
        )
    if not victims:
        return f"OOM kill{where} at {scope} (victim not in the kernel log)"
    victim = victims[0]
    rss_kb = sum(
        v or 0 for v in (victim.anon_rss_kb, victim.file_rss_kb, victim.shmem_rss_kb)
    )
    rss = f", rss {_mib(rss_kb * 1024)}" if rss_kb else ""
    return f"OOM killer killed {victim.comm} (pid {victim.pid}{rss}){where} at {scope}"


def _usage_text(incident: Incident) -> str | None:
    usage_kb = incident.memcg.usage_kb if incident.memcg else None
    limit_kb = incident.memcg.limit_kb if incident.memcg else None
    limit = limit_kb * 1024 if limit_kb is not None else None
    if limit is None and incident.k8s is not None:
        scope_limit = (
            incident.k8s.pod_memory_limit_bytes
            if incident.limit_scope == "pod"
            else incident.k8s.container_memory_limit_bytes
        )
        limit = scope_limit if incident.limit_scope in ("container", "pod") else None
    if usage_kb is None:
        return f"limit {_mib(limit)}" if limit is not None else None
    if limit is None:
        return f"usage {_mib(usage_kb * 1024)}"
    return f"usage {_mib(usage_kb * 1024)} of limit {_mib(limit)}"


def _dominant_text(incident: Incident) -> str | None:
    parts: list[str] = []
    b = incident.breakdown_bytes
    if b is not None:
        kinds = {"anon": b.anon, "file cache": b.file, "shmem/tmpfs": b.shmem, "kernel": b.kernel}
        known = {k: v for k, v in kinds.items() if v}
        if known:
            top = max(known, key=lambda k: known[k])
            parts.append(f"mostly {top} {_mib(known[top])}")
            if top == "anon" and b.thp and b.anon and b.thp * 2 >= b.anon:
                parts.append(f"of which THP {_mib(b.thp)}")
    rows = [t for t in incident.tasks if t.rss_pages is not None]
    if rows:
        top_task = max(rows, key=lambda t: t.rss_pages or 0)
        parts.append(f"largest process {top_task.name} (pid {top_task.pid})")
    return ", ".join(parts) or None


def _mib(value: int | None) -> str:
    """Bytes for a person: MiB, or GiB from 1 GiB up (GPU figures)."""
    if value is None:
        return "?"
    if value >= 2**30:
        return f"{value / 2**30:.1f}GiB"
    return f"{value / 2**20:.1f}MiB"


def annotation_value(incident: Incident, now: datetime, container: str | None) -> str:
    """Compact JSON for `oomwatch.io/last-oom-kill`: the latest incident at a glance."""
    victim = incident.victim
    summary: dict[str, Any] = {
        "time": incident.wall_time or micro_time(now),
        "kind": incident.kind,
        "reason": event_reason(incident),
        "container": container,
        "victim": escape_control(victim.comm) if victim else None,
        "pid": victim.pid if victim else None,
        "scope": incident.limit_scope,
        "usage_bytes": incident.memcg.usage_kb * 1024
        if incident.memcg and incident.memcg.usage_kb is not None
        else None,
        "limit_bytes": incident.memcg.limit_kb * 1024
        if incident.memcg and incident.memcg.limit_kb is not None
        else None,
        "container_survived": incident.container_survived,
    }
    compact = {k: v for k, v in summary.items() if v is not None}
    return json.dumps(compact, separators=(",", ":"), sort_keys=True)
