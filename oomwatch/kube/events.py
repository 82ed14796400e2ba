"""Incident -> `events.k8s.io/v1` Event body and pod annotation (pure functions).

Reasons are oomwatch's own so they never collide with kubelet's (`OOMKilling`, `Evicted`,
`SystemOOM`), and each names one kind of incident.  The note is what a person reads in
`kubectl get events`: the diagnosis's verdict and advice (the same the log line, the store
and `oomwatch report` carry) and the command for the full report.  Every untrusted string
(process and cgroup names, pod status messages) is escaped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from oomwatch.incident import Incident
from oomwatch.kube.pods import PodInfo
from oomwatch.kube.summary import (
    REPORTING_CONTROLLER,
    SUMMARY_ANNOTATION,
    kill_summary,
    workload_name,
)
from oomwatch.sanitize import escape_control

ANNOTATION_KEY = "oomwatch.io/last-oom-kill"
NODE_EVENT_NAMESPACE = "default"  # the API server puts cluster-scoped objects' Events here
NOTE_MAX_BYTES = 1024  # the API server's limit is on the UTF-8 bytes (Go len)

# A process of the container was killed at its (or its cgroup's) limit and the container died:
# not a child-only, group, pod-limit or node kill.  (Named OOMKillDetected before 0.2, the
# name of the alert that fires for every kill.)
REASON_CONTAINER = "ContainerOOMKill"
REASON_CHILD = "ChildProcessOOMKilled"
REASON_GROUP = "GroupOOMKill"
REASON_POD_LIMIT = "PodLimitOOMKill"
REASON_NODE = "NodeOOMKill"
REASON_CUDA = "CUDAOutOfMemory"
REASON_FRAMEWORK = "FrameworkOutOfMemory"  # a framework OOM off the GPU (TensorFlow on CPU:0)
REASON_EVICTION = "MemoryPressureEviction"
REASON_FALSE_OOMKILLED = "OOMKilledWithoutKernelKill"


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
    incident: Incident,
    node_name: str,
    now: datetime,
    pod: PodInfo | None,
    hint: ReportHint | None = None,
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
            # The diagnosis as data, for `kubectl oomwatch top` (oomwatch.kube.summary).
            "annotations": {
                SUMMARY_ANNOTATION: kill_summary(incident, workload, container, reason)
            },
        },
        "eventTime": micro_time(now),
        "type": "Warning",
        "reason": reason,
        "action": _action(incident),
        "note": event_note(
            incident,
            hint or ReportHint(),
            node_name,
            f"{pod.namespace}/{pod.name}" if regarding["kind"] == "Pod" and pod else None,
        ),
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


def event_note(incident: Incident, hint: ReportHint, node: str, pod: str | None) -> str:
    """What `kubectl get events` shows: the verdict, the advice, the finding codes and the
    command for the full report, all from the incident's one diagnosis (the log line, the
    store and `oomwatch report` say the same), within the API's 1024 bytes: the advice is
    clipped first, never the command.  `pod`: `namespace/name` of the pod the Event is on."""
    verdict = incident.verdict or f"{incident.kind} OOM incident (not diagnosed)."
    codes = ", ".join(f.code for f in incident.findings)
    tail = (f" Findings: {codes}." if codes else "") + f" Full report: {hint.command(node, pod)}"
    head = escape_control(verdict)
    advice = (incident.recommendation or {}).get("message")
    if isinstance(advice, str) and advice:
        room = (
            NOTE_MAX_BYTES
            - len(head.encode(errors="replace"))
            - len(escape_control(tail).encode(errors="replace"))
        )
        head += clip_utf8(" Advice: " + escape_control(advice), max(room, 0))
    return clip_utf8(head + escape_control(tail), NOTE_MAX_BYTES)


@dataclass(frozen=True, slots=True)
class ReportHint:
    """Where a person reads the full report: the `OOMIncident` objects of the pod's namespace
    (oomwatch.kube.oomincident), through the plugin or `kubectl describe`; viewing the
    namespace is the only grant either needs (no exec into the agent)."""

    def command(self, node: str, pod: str | None) -> str:
        """`kubectl oomwatch report pod/NAME -n NS`, or `node/NAME` for a node's Event."""
        if pod is None:
            return f"kubectl oomwatch report node/{node}"
        namespace, _, name = pod.partition("/")
        return f"kubectl oomwatch report pod/{name} -n {namespace}"


def clip_utf8(text: str, max_bytes: int) -> str:
    """`text`, or its longest prefix ending "..." whose UTF-8 fits `max_bytes` (whole chars).

    A lone surrogate (undecodable input) becomes "?", so the count is what goes on the wire.
    """
    encoded = text.encode(errors="replace")
    if len(encoded) > max_bytes:
        encoded = encoded[: max_bytes - 3] + b"..."
    return encoded.decode(errors="ignore")


def annotation_value(incident: Incident, now: datetime, container: str | None) -> str:
    """Compact JSON for `oomwatch.io/last-oom-kill`: the latest incident at a glance, with
    its diagnosis (verdict, finding codes, the advice's action and sizes)."""
    victim = incident.victim
    rec = incident.recommendation or {}
    summary: dict[str, Any] = {
        "time": incident.wall_time or micro_time(now),
        "kind": incident.kind,
        "reason": event_reason(incident),
        "container": container,
        "victim": escape_control(victim.comm) if victim else None,
        "pid": victim.pid if victim else None,
        "scope": incident.limit_scope,
        "usage_bytes": incident.memcg.usage_bytes if incident.memcg else None,
        "limit_bytes": incident.memcg.limit_bytes if incident.memcg else None,
        "container_survived": incident.container_survived,
        "verdict": incident.verdict,
        "verdict_code": incident.verdict_code,
        "findings": [f.code for f in incident.findings] or None,
        "advice": rec.get("action"),
        "memory_limit": rec.get("memory_limit"),
        "memory_request": rec.get("memory_request"),
    }
    compact = {k: v for k, v in summary.items() if v is not None}
    return json.dumps(compact, separators=(",", ":"), sort_keys=True)
