"""Which limit the kernel enforced, and pod settings that made the kill likely.

The limit finding is the first thing a reader needs: "your container's 256 MiB limit" and
"the node ran out of memory" call for opposite fixes (raise a limit vs. lower requests
elsewhere / add nodes).
"""

from __future__ import annotations

from collections.abc import Callable

from oomwatch.diagnosis.evidence import limit_bytes, usage_bytes, where, who
from oomwatch.diagnosis_codes import FindingCode
from oomwatch.incident import Finding, Incident, is_constrained_kill
from oomwatch.sanitize import escape_control
from oomwatch.units import fmt_bytes

_SCOPE_CODES: dict[str, FindingCode] = {
    "container": "limit-container",
    "pod": "limit-pod",
    "qos": "limit-qos",
    "node": "limit-node-allocatable",
    "cgroup": "limit-cgroup",
}
_CONSTRAINED_CODES: dict[str, FindingCode] = {
    "cpuset": "limit-cpuset",
    "mempolicy": "limit-mempolicy",
}
_SCOPE_WORDS = {
    "container": "the container's memory limit",
    "pod": "the pod-level memory limit (the sum of its containers' limits)",
    "qos": "the QoS-class cgroup's memory limit",
    "node": "node allocatable (the kubepods cgroup: all pods together)",
    "cgroup": "the memory limit of cgroup",
}


def limit_finding(incident: Incident) -> Finding | None:
    """`limit-*`: which limit the kill enforced, with usage against it."""
    for check in _LIMIT_CHECKS:
        finding = check(incident)
        if finding is not None:
            return finding
    return None


def _memcg_limit(incident: Incident) -> Finding | None:
    scope = incident.limit_scope
    if incident.kind != "memcg" or scope not in _SCOPE_CODES:
        return None
    usage, limit = usage_bytes(incident), limit_bytes(incident)
    memcg = incident.memcg
    evidence: dict[str, object] = {"limit_scope": scope, "oom_memcg": incident.oom_memcg}
    words = _SCOPE_WORDS[scope]
    if scope == "cgroup":
        words = f"{words} {escape_control(incident.oom_memcg or '?')}"
    if memcg is not None:
        evidence.update(usage_bytes=usage, limit_bytes=limit, failcnt=memcg.failcnt)
    if limit is not None:
        numbers = f" of {fmt_bytes(limit)} was reached (usage {fmt_bytes(usage)}"
        numbers += f", hit {_times(memcg.failcnt)})" if memcg and memcg.failcnt else ")"
    else:
        numbers = " was reached (the report does not show the numbers)"
    message = f"{who(incident)} in {where(incident)} was killed because {words}{numbers}."
    if scope == "pod":
        message += " No single container was over its own limit."
    return Finding(_SCOPE_CODES[scope], "critical", message, evidence)


def _global(incident: Incident) -> Finding | None:
    if incident.kind != "global":
        return None
    evidence = {"kind": incident.kind, "constraint": incident.constraint}
    message = (
        f"The whole node ran out of memory (global OOM, {incident.constraint or 'no constraint'}"
        f" printed); the kernel chose {who(incident)} in {where(incident)}: no cgroup limit was"
        " involved, so the memory of every pod and system daemon counted."
    )
    return Finding("limit-node", "critical", message, evidence)


def _constrained(incident: Incident) -> Finding | None:
    if not is_constrained_kill(incident.kind):
        return None
    evidence = {"kind": incident.kind, "constraint": incident.constraint}
    if incident.kind == "cpuset":
        why = "the memory nodes its cpuset allows (cpuset.mems) were full"
    else:
        why = "the NUMA nodes its memory policy (mbind/set_mempolicy) allows were full"
    message = (
        f"{who(incident)} was killed because {why} ({incident.constraint}), although other"
        " NUMA nodes may have had free memory."
    )
    return Finding(_CONSTRAINED_CODES[incident.kind], "critical", message, evidence)


_LIMIT_CHECKS: tuple[Callable[[Incident], Finding | None], ...] = (
    _memcg_limit,
    _global,
    _constrained,
)


def no_memory_limit(incident: Incident) -> Finding | None:
    """The container had no limit of its own, so a pod/node limit or the node itself hit."""
    ctx = incident.k8s
    if ctx is None or ctx.container is None or ctx.container_memory_limit_bytes is not None:
        return None
    if incident.limit_scope not in ("pod", "qos", "node", "global"):
        return None
    evidence = {
        "container": ctx.container,
        "container_memory_limit_bytes": None,
        "container_memory_request_bytes": ctx.container_memory_request_bytes,
        "limit_scope": incident.limit_scope,
    }
    message = (
        f"Container {escape_control(ctx.container)} sets no memory limit, so nothing stopped it"
        f" before the {incident.limit_scope} level ran out; set resources.limits.memory so the"
        " kernel stops this container, not its neighbours."
    )
    return Finding("no-memory-limit", "warning", message, evidence)


def besteffort_qos(incident: Incident) -> Finding | None:
    """BestEffort pods are first in line: oom_score_adj 1000 and evicted first."""
    qos = incident.qos_class or (incident.k8s.qos_class if incident.k8s else None)
    if qos is None or qos.lower() != "besteffort":
        return None
    evidence = {"qos_class": "besteffort", "pod_uid": incident.pod_uid}
    message = (
        f"{where(incident)} is BestEffort (no requests or limits): kubelet gives its processes"
        " oom_score_adj 1000, so the kernel kills them first, and node-pressure eviction picks"
        " it first; set memory requests (and a limit) to make it Burstable or Guaranteed."
    )
    return Finding("besteffort-qos", "warning", message, evidence)


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"
