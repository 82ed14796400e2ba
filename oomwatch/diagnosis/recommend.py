"""What to change, from evidence: request ≈ median sampled usage, limit ≈ max(usage at kill,
peak) + a stated buffer, rounded up to Mi — or, when memory grows without bound, say that a
larger limit only postpones the next kill.  When the node (or all pods together) ran out, no
limit of the victim was hit, so the advice is requests, placement or capacity: never a limit
as large as what ran out.  Sizes read as human sizes (`8.2 GiB`); the values to paste into
a container's spec follow in a sentence of their own (`resources.limits.memory: 8411Mi`).

No advice without its evidence: none for a kill of unknown kind or a report where nothing
was killed; no limit for a cpuset or NUMA-policy kill (other nodes had memory); a memcg limit
is sized only from the cgroup's usage or charge (report or samples), never from the killed
process's RSS, which may be one small child of many.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oomwatch.diagnosis.device_advice import device_advice
from oomwatch.diagnosis.evidence import pct, who
from oomwatch.diagnosis.node_advice import node_ran_out
from oomwatch.diagnosis.sizing import (
    NODE_SCOPES,
    add_basis,
    manifest_values,
    no_plateau,
    on_kubernetes,
    round_up_mi,
    workload_sizes,
)
from oomwatch.diagnosis_codes import FindingCode, Recommendation
from oomwatch.incident import (
    KERNEL_KILL_KINDS,
    Finding,
    Incident,
    is_constrained_kill,
    is_kernel_kill,
)
from oomwatch.units import fmt_bytes, quantity

DEFAULT_BUFFER_PERCENT = 20
# Kernel memory at least this share of what the cgroup was charged: the processes did not
# fill it, so a limit sized from the usage would only feed what holds the kernel memory.
KERNEL_MAJORITY = 0.5
GROWTH_CODES: tuple[FindingCode, ...] = ("leak-trend",)


def recommend(
    incident: Incident, findings: Sequence[Finding], buffer_percent: int = DEFAULT_BUFFER_PERCENT
) -> Recommendation | None:
    """The recommendation dict for `incident.recommendation`, or None when nothing supports one."""
    codes = {f.code for f in findings}
    if incident.kind == "framework":
        return device_advice(findings)
    if incident.kind not in (*KERNEL_KILL_KINDS, "eviction"):
        return None
    if incident.kind == "unknown" or _nothing_killed(incident):
        return None
    growth = [f for f in findings if f.code in GROWTH_CODES]
    if growth:
        return {
            "action": "fix-growth",
            "limit_will_not_help": True,
            "based_on": growth[0].evidence,
            "message": (
                "Memory grows steadily until the kill: a larger limit only delays the next one;"
                " find the leak or bound the growth (caches, queues, buffers)."
            ),
        }
    if is_constrained_kill(incident.kind):
        return _numa_bound(incident)
    kernel = next((f for f in findings if f.code == "kernel-memory"), None)
    if kernel is not None and incident.limit_scope not in NODE_SCOPES:
        ev = kernel.evidence
        if ev["kernel_bytes"] >= KERNEL_MAJORITY * ev["charged_bytes"]:
            return _kernel_bound(incident, ev)
    if incident.limit_scope in NODE_SCOPES or incident.kind == "global":
        return node_ran_out(incident, buffer_percent)
    return _resize(incident, codes, buffer_percent)


def _resize(
    incident: Incident, codes: set[FindingCode], buffer_percent: int
) -> Recommendation | None:
    """A limit (and request) sized from what the workload used; None without sizes."""
    sized = workload_sizes(incident)
    if sized is None:
        return None
    base, request, basis = sized
    if (growth := no_plateau(incident)) is not None:
        watch: Recommendation = {
            "action": "watch-longer",
            "limit_will_not_help": False,
            "memory_limit_bytes": None,
            "memory_limit": None,
            "memory_request_bytes": request,
            "memory_request": quantity(request) if request is not None else None,
        }
        add_basis(watch, basis)
        watch["message"] = growth
        return watch
    limit = round_up_mi(base * (1 + buffer_percent / 100))
    scope = incident.limit_scope
    one_container = False  # a limit of one container's spec: the sizes have a manifest form
    if scope == "pod":
        target = "Set the pod's containers' memory limits to at least a total of"
    elif incident.kind == "memcg" and scope is None:
        target = "Raise the memory limit that was hit (the report does not name its cgroup) to"
        target += " at least"
    elif incident.container_id or incident.pod_uid:
        target = "Set the container's memory limit to at least"
        one_container = on_kubernetes(incident)
    else:
        target = "Set a memory limit on this workload's cgroup of at least"
    message = f"{target} {fmt_bytes(limit)}"
    message += f" ({buffer_percent} % above {basis['peak_source']})"
    if request is not None:
        message += f" and the request to about {fmt_bytes(request)} (median of sampled usage)"
    if incident.kind == "eviction":
        message += (
            "; the node, not this workload's limit, ran out: requests below real usage let the"
            " scheduler overpack the node"
        )
    if "many-processes" in codes:
        message += "; or run fewer/smaller worker processes"
    rec: Recommendation = {
        "action": "resize",
        "limit_will_not_help": False,
        "memory_limit_bytes": limit,
        "memory_limit": quantity(limit),
        "memory_request_bytes": request,
        "memory_request": quantity(request) if request is not None else None,
        "buffer_percent": buffer_percent,
    }
    add_basis(rec, basis)
    rec["message"] = message + "." + (manifest_values(limit, request) if one_container else "")
    return rec


def _nothing_killed(incident: Incident) -> bool:
    """The report shows an OOM but no kill (nothing killable, a task already exiting, or a
    cut log); a header-suppressed or counter-only kill did kill something."""
    kernel = is_kernel_kill(incident.kind)
    return (
        kernel
        and incident.victim is None
        and not (incident.header_suppressed or incident.kmsg_missing)
    )


def _numa_bound(incident: Incident) -> Recommendation:
    """A cpuset or memory-policy kill: the allowed NUMA nodes were full, not a limit."""
    if incident.kind == "cpuset":
        bound = "its cpuset's memory nodes (cpuset.mems)"
        fix = "allow more memory nodes in the cpuset (or the pod's CPU/topology-manager placement)"
    else:
        bound = "the NUMA nodes its memory policy allows (mbind/set_mempolicy, numactl)"
        fix = "widen the memory policy (e.g. numactl --interleave=all, or no --membind)"
    return {
        "action": "widen-numa-nodes",
        "limit_will_not_help": True,
        "memory_limit_bytes": None,
        "memory_limit": None,
        "message": (
            f"{who(incident)} was killed because {bound} were full while other nodes may have"
            f" had memory: a memory limit does not change that; {fix}, or use less memory on"
            " those nodes."
        ),
    }


def _kernel_bound(incident: Incident, evidence: dict[str, Any]) -> Recommendation:
    """Kernel memory, not the processes, filled the cgroup: find what holds it first."""
    kernel, whole = evidence["kernel_bytes"], evidence["charged_bytes"]
    return {
        "action": "find-kernel-memory",
        "limit_will_not_help": True,
        "memory_limit_bytes": None,
        "memory_limit": None,
        "kernel_bytes": kernel,
        "charged_bytes": whole,
        "message": (
            f"Kernel memory held {fmt_bytes(kernel)} ({pct(kernel, whole)}) of the"
            f" {fmt_bytes(whole)} charged to the cgroup, not {who(incident)}'s pages: a"
            " larger limit only gives it more room; find what holds it (sockets, many open"
            " files' dentries and inodes, threads' stacks, page tables; the cgroup's"
            " memory.stat or memory.kmem.slabinfo while it grows) or a kernel that leaks it."
        ),
    }
