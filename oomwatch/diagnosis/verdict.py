"""The one line a reader needs first (who, what limit, why, what to do), and the list of
what the evidence does not say, so silence is never mistaken for "nothing wrong".
"""

from __future__ import annotations

from oomwatch.diagnosis.evidence import charged_bytes, fmt_bytes, limit_bytes, pct, where, who
from oomwatch.incident import Finding, Incident
from oomwatch.sanitize import escape_control

_LIMIT_WORDS = {
    "limit-container": "its container memory limit",
    "limit-pod": "the pod-level memory limit",
    "limit-qos": "the QoS cgroup's memory limit",
    "limit-node-allocatable": "node allocatable (all pods together)",
    "limit-cgroup": "its cgroup's memory limit",
    "limit-node": "node memory (global OOM)",
    "limit-cpuset": "its cpuset's memory nodes",
    "limit-mempolicy": "its NUMA memory policy",
}
_CAUSE_ORDER = (
    "leak-trend",
    "spike",
    "thp-hidden",
    "tmpfs-shmem",
    "page-cache",
    "kernel-memory",
    "many-processes",
    "score-adj-victim",
)


def _cause(incident: Incident, by_code: dict[str, Finding]) -> str:
    for code in _CAUSE_ORDER:
        finding = by_code.get(code)
        if finding is None:
            continue
        ev = finding.evidence
        if code == "leak-trend":
            return f"steady growth of {fmt_bytes(ev['slope_bytes_per_second'])}/s"
        if code == "spike":
            return f"a {fmt_bytes(ev['jump_bytes'])} jump in the last seconds"
        if code == "many-processes":
            return f"memory spread over {ev['task_count']} processes"
        if code == "score-adj-victim":
            return f"oom_score_adj {ev['victim_oom_score_adj']} picked it over a larger process"
        part_key = {
            "thp-hidden": ("thp_bytes", "transparent hugepages"),
            "tmpfs-shmem": ("shmem_bytes", "tmpfs/shared memory"),
            "page-cache": ("file_bytes", "page cache"),
            "kernel-memory": ("kernel_bytes", "kernel memory"),
        }[code]
        part = ev[part_key[0]] - (ev.get("shmem_bytes") or 0 if code == "page-cache" else 0)
        return f"mostly {part_key[1]} ({pct(part, ev['charged_bytes'])})"
    parts, whole = incident.breakdown_bytes, charged_bytes(incident)
    if parts is not None and parts.anon is not None and whole:
        return f"anonymous memory (heap) {fmt_bytes(parts.anon)} ({pct(parts.anon, whole)})"
    return "what filled it is unknown (no memory breakdown in the report)"


def verdict(incident: Incident) -> str:
    """`<who> in <where> was killed at <limit>: <why>; <what to do>`."""
    by_code = {f.code: f for f in incident.findings}
    rec = incident.recommendation or {}
    todo = str(rec.get("message") or "no recommendation: too little evidence").rstrip(".")
    for code in ("framework-oom", "eviction", "false-oomkilled"):
        if code in by_code:
            head = by_code[code].message.rstrip(".")
            return f"{head} — {todo}." if rec.get("message") else f"{head}."
    if incident.victim is None and not incident.header_suppressed:
        invoker = incident.invoker.comm if incident.invoker else None
        by = f" by {escape_control(invoker)}" if invoker else ""
        return (
            f"The OOM killer was invoked{by} but this log shows no kill (nothing was killable,"
            " another task was already exiting, or the log is cut)."
        )
    limit_code = next((c for c in _LIMIT_WORDS if c in by_code), None)
    if limit_code is None:
        what = "an unknown limit (the report does not say which)"
    else:
        what = _LIMIT_WORDS[limit_code]
        limit = limit_bytes(incident)
        if limit is not None:
            what += f" of {fmt_bytes(limit)}"
    cause = _cause(incident, by_code)
    return f"{who(incident)} in {where(incident)} was killed at {what}: {cause} — {todo}."


def unknowns(incident: Incident) -> list[str]:
    """What this incident's evidence does not say (shown by every report format)."""
    if incident.kind in ("framework", "eviction", "false_oomkilled"):
        return [] if incident.k8s else ["pod name unknown (no Kubernetes lookup)"]
    out: list[str] = []
    if incident.victim is None:
        out.append("victim unknown (no `Killed process` line)")
    if incident.kind == "unknown" or incident.limit_scope is None:
        out.append("which limit was hit is unknown (no `oom-kill:` / `Task in` line)")
    if incident.kind == "memcg" and (incident.memcg is None or incident.memcg.usage_kb is None):
        out.append("usage and limit unknown (no `memory: usage` line)")
    if incident.breakdown_bytes is None:
        out.append("memory breakdown unknown (no stats block in the report)")
    if not incident.tasks:
        out.append("task table unknown (not printed, or cut from this log)")
    if incident.timeline is None:
        out.append(
            "memory timeline unknown (not sampled by the oomwatch daemon): leak/spike not judged"
        )
    if incident.pod_uid and incident.k8s is None:
        out.append("pod and container names unknown (no Kubernetes lookup)")
    if incident.container_survived is None and incident.kind != "global":
        out.append("whether the container survived the kill is unknown")
    return out
