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

import math
import statistics
from collections.abc import Sequence
from typing import Any

from oomwatch.diagnosis.evidence import (
    charged_bytes,
    limit_bytes,
    own_usage_bytes,
    page_bytes,
    pct,
    usage_bytes,
    victim_rss_bytes,
    who,
)
from oomwatch.incident import (
    KERNEL_KILL_KINDS,
    Finding,
    Incident,
    is_constrained_kill,
    is_kernel_kill,
)
from oomwatch.units import MIB, fmt_bytes, quantity

DEFAULT_BUFFER_PERCENT = 20
# Kernel memory at least this share of what the cgroup was charged: the processes did not
# fill it, so a limit sized from the usage would only feed what holds the kernel memory.
KERNEL_MAJORITY = 0.5
GROWTH_CODES = ("leak-trend",)
# A sampled window "shows no plateau" when it rose by this share of the usage at its end, its
# last third still rose at this share of the whole window's rate (`_no_plateau`) ...
PLATEAU_MIN_SAMPLES = 4
PLATEAU_MIN_RISE_SHARE = 0.1
PLATEAU_MIN_TAIL_RATE = 0.5
PLATEAU_MIN_HEAD_RATE = 0.25  # and its first half rose too: growth throughout, not a spike
NODE_SCOPES = ("node", "qos", "global")
BESTEFFORT_SCORE_ADJ = 1000  # kubelet's oom_score_adj for BestEffort pods (no request)
_RAN_OUT = {
    "node": "Node allocatable{size}, the memory all pods share,",
    "qos": "The QoS-class cgroup's memory{size}, shared by all pods of that class,",
    "global": "The node's memory{size}",
}


def round_up_mi(value: float) -> int:
    return math.ceil(value / MIB) * MIB


def manifest_values(limit: int | None = None, request: int | None = None) -> str:
    """The sizes advised, as the values a container's spec takes: prose reads human sizes,
    and this sentence, set apart, is what to paste (`resources.limits.memory: 8411Mi`)."""
    fields = [("limits", limit), ("requests", request)]
    shown = [f"`resources.{name}.memory: {quantity(v)}`" for name, v in fields if v is not None]
    return f" In the container's spec: {', '.join(shown)}." if shown else ""


def recommend(
    incident: Incident, findings: Sequence[Finding], buffer_percent: int = DEFAULT_BUFFER_PERCENT
) -> dict[str, Any] | None:
    """The recommendation dict for `incident.recommendation`, or None when nothing supports one."""
    codes = {f.code for f in findings}
    if incident.kind == "framework":
        return _device(findings)
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
        return _node_ran_out(incident, buffer_percent)
    return _resize(incident, codes, buffer_percent)


_DEVICE_ACTIONS = {  # cause finding -> action
    "device-fragmentation": "fix-fragmentation",
    "device-shared": "free-shared-device",
    "device-too-large": "reduce-device-memory",
    "device-footprint": "reduce-device-memory",
}


def _device(findings: Sequence[Finding]) -> dict[str, Any]:
    """A framework OOM's advice: the cause finding's, else the general one."""
    cause = next((f for f in findings if f.code in _DEVICE_ACTIONS), None)
    if cause is None:
        message = (
            "A container memory limit does not govern device memory: lower the batch size or"
            " model footprint, or fix fragmentation (expandable_segments) if it shows."
        )
        return {"action": "reduce-device-memory", "limit_will_not_help": True,
                "message": message}  # fmt: skip
    if cause.code == "device-fragmentation":
        message = (
            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the container's"
            " environment: the caching allocator then grows segments instead of leaving"
            " reserved memory it cannot reuse; the batch size can stay."
        )
    elif cause.code == "device-shared":
        message = cause.message
    elif cause.code == "device-too-large":
        message = (
            "The request alone is larger than the device: only a smaller request helps (a"
            " smaller batch, a sharded model, activation checkpointing); no allocator setting"
            " or memory limit fits it."
        )
    else:
        message = (
            "Lower the batch size or the model's footprint (mixed precision, activation"
            " checkpointing, sharding): this job's own memory fills the device."
        )
    return {"action": _DEVICE_ACTIONS[cause.code], "limit_will_not_help": True,
            "based_on": cause.evidence, "message": message}  # fmt: skip


def _resize(incident: Incident, codes: set[str], buffer_percent: int) -> dict[str, Any] | None:
    """A limit (and request) sized from what the workload used; None without sizes."""
    sizes = _sizes(incident)
    if sizes is None:
        return None
    base, request, basis = sizes
    if (growth := _no_plateau(incident)) is not None:
        return {
            "action": "watch-longer",
            "limit_will_not_help": False,
            "memory_limit_bytes": None,
            "memory_limit": None,
            "memory_request_bytes": request,
            "memory_request": quantity(request) if request is not None else None,
            **basis,
            "message": growth,
        }
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
        one_container = _on_kubernetes(incident)
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
    return {
        "action": "resize",
        "limit_will_not_help": False,
        "memory_limit_bytes": limit,
        "memory_limit": quantity(limit),
        "memory_request_bytes": request,
        "memory_request": quantity(request) if request is not None else None,
        "buffer_percent": buffer_percent,
        **basis,
        "message": message + "." + (manifest_values(limit, request) if one_container else ""),
    }


def _nothing_killed(incident: Incident) -> bool:
    """The report shows an OOM but no kill (nothing killable, a task already exiting, or a
    cut log); a header-suppressed or counter-only kill did kill something."""
    kernel = is_kernel_kill(incident.kind)
    return (
        kernel
        and incident.victim is None
        and not (incident.header_suppressed or incident.kmsg_missing)
    )


def _numa_bound(incident: Incident) -> dict[str, Any]:
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


def _kernel_bound(incident: Incident, evidence: dict[str, Any]) -> dict[str, Any]:
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


def _rss_sizes_the_workload(incident: Incident) -> bool:
    """The killed processes' RSS stands for their workload only where no cgroup usage can:
    a global or node/QoS-level kill (the pod's share), and only if the kernel killed the
    process it selected (pre-5.1 kernels may sacrifice a small child instead)."""
    if incident.kind == "memcg" and incident.limit_scope not in NODE_SCOPES:
        return False
    victim = incident.victim
    return victim is not None and incident.selected_pid in (None, victim.pid)


def _node_ran_out(incident: Incident, buffer_percent: int) -> dict[str, Any]:
    """Node allocatable, a QoS cgroup or the whole node ran out: no limit of the victim's.

    A pod's own use is sized for its request (what the scheduler reserves); a limit is
    suggested only where it is known to fit below what ran out.  A process outside any pod
    (a plain container's too: no scheduler reserves for it) is not sized at all: the kernel
    picked it by score, which says little about what filled the node.
    """
    scope = "global" if incident.kind == "global" else incident.limit_scope or "global"
    ran_out = limit_bytes(incident)
    size = f" of {fmt_bytes(ran_out)}" if ran_out is not None else ""
    head = _RAN_OUT[scope].format(size=size) + " ran out"
    if incident.victim is not None:
        head += f", not a limit of {who(incident)}: raising its limit cannot help"
    else:
        head += ", not a limit of the process killed"
    parts = [head]
    rec: dict[str, Any] = {
        "action": "relieve-node",
        "limit_will_not_help": True,
        "scope_limit_bytes": ran_out,
        "buffer_percent": buffer_percent,
        "memory_request_bytes": None,
        "memory_request": None,
        "memory_limit_bytes": None,
        "memory_limit": None,
    }
    # A request is Kubernetes' to reserve: a plain container (`/docker/<id>`) has none.
    kubernetes = _on_kubernetes(incident)
    in_pod = kubernetes and bool(incident.pod_uid or incident.container_id)
    sizes = _sizes(incident) if in_pod else None
    if sizes is not None:
        base, request, basis = sizes
        need = round_up_mi(base * (1 + buffer_percent / 100))
        fits = None if ran_out is None else need < ran_out
        rec.update(basis, needed_bytes=need, fits_node=fits)
        if fits is False:
            parts.append(
                f"this workload needs about {fmt_bytes(need)} ({buffer_percent} % above"
                f" {basis['peak_source']}), more than the {fmt_bytes(ran_out)} that ran out: it"
                " does not fit this node; run it on a node with more memory (another node pool,"
                " nodeSelector/affinity) or reduce its memory use"
            )
        else:
            request_source = "median of sampled usage" if request else basis["peak_source"]
            request = request or round_up_mi(base)
            rec.update(memory_request_bytes=request, memory_request=quantity(request))
            text = (
                f"set its memory request to about {fmt_bytes(request)} ({request_source}) so the"
                " scheduler reserves what it uses"
            )
            if fits:
                rec.update(memory_limit_bytes=need, memory_limit=quantity(need))
                text += (
                    f", and a memory limit of {fmt_bytes(need)} ({buffer_percent} % above"
                    f" {basis['peak_source']}; below the {fmt_bytes(ran_out)} that ran out) so"
                    " the kernel stops it before the node runs out"
                )
            parts.append(text)
    elif (victim := incident.victim) is not None and (rss := victim_rss_bytes(victim)):
        text = f"it held {fmt_bytes(rss)} at the kill; the kernel kills by score, not"
        text += " necessarily what filled the node"
        parts.append(text + (" (see the largest tasks)" if incident.tasks else ""))
    besteffort = _besteffort_bytes(incident) if kubernetes else None
    if besteffort is not None:
        rec["besteffort_rss_bytes"] = besteffort
        parts.append(
            f"processes of BestEffort pods (oom_score_adj {BESTEFFORT_SCORE_ADJ}: no memory"
            f" request) held {fmt_bytes(besteffort)}: give those pods requests near their use"
        )
    if kubernetes:
        parts.append(
            "pods using more than they request let the scheduler overpack the node: set memory"
            " requests near real usage for those pods, or add node memory"
        )
    else:
        parts.append(
            "reduce what runs on this machine or add memory (on a Kubernetes node: set memory"
            " requests near real usage, so the scheduler does not overpack it)"
        )
    manifest = manifest_values(rec["memory_limit_bytes"], rec["memory_request_bytes"])
    rec["message"] = "; ".join(parts) + "." + manifest
    return rec


def _charged_source(incident: Incident, charged: int) -> str:
    swap = (incident.memcg_stats or {}).get("swap")
    text = f"the {fmt_bytes(charged)} charged at the kill per the memcg stats"
    return text + (f", with {fmt_bytes(swap)} more in swap" if swap else "")


def _sizes(incident: Incident) -> tuple[int, int | None, dict[str, Any]] | None:
    """(base bytes for the limit, request bytes or None, what they are based on)."""
    timeline = incident.timeline
    samples = timeline.samples if timeline else []
    known = [
        v
        for v in (timeline.usage_at_kill_bytes if timeline else None, own_usage_bytes(incident))
        if v
    ]
    at_kill = max(known) if known else None
    source = "usage at the kill"
    scope = incident.limit_scope
    own_memcg = incident.kind == "memcg" and scope not in NODE_SCOPES
    if at_kill is None and own_memcg:
        at_kill = usage_bytes(incident)
        if at_kill is None and (charged := charged_bytes(incident)):  # no `memory: usage` line
            at_kill, source = charged, _charged_source(incident, charged)
    if at_kill is None and _rss_sizes_the_workload(incident):
        # The memcg line (if any) is the node's or QoS level's total, not this container's.
        rss = [b for v in incident.victims if (b := victim_rss_bytes(v))]
        at_kill, source = (sum(rss) if rss else None), "the killed processes' RSS"
    peak = (timeline.peak_bytes if timeline else None) or (
        max(s.usage_bytes for s in samples) if samples else None
    )
    candidates = [v for v in (at_kill, peak) if v]
    if not candidates:
        return None
    base = max(candidates)
    if peak and base == peak and peak != at_kill:
        source = "the sampled peak"
    request = round_up_mi(statistics.median(s.usage_bytes for s in samples)) if samples else None
    window = samples[-1].t_seconds - samples[0].t_seconds if len(samples) > 1 else None
    basis: dict[str, Any] = {
        "usage_at_kill_bytes": at_kill,
        "peak_bytes": peak,
        "peak_source": source,
        "window_seconds": window,
        "samples": len(samples),
        "based_on": (
            f"{len(samples)} samples over {window:.0f} s before the kill"
            if window
            else "what the kill report printed only (no sampled timeline)"
        ),
    }
    return base, request, basis


def _no_plateau(incident: Incident) -> str | None:
    """Advice in words where the sampled window shows growth to the very end: nothing in it
    says where the usage would have levelled off, so no limit is sized from it."""
    samples = incident.timeline.samples if incident.timeline else []
    if len(samples) < PLATEAU_MIN_SAMPLES:
        return None
    span = samples[-1].t_seconds - samples[0].t_seconds
    first, last = samples[0].usage_bytes, samples[-1].usage_bytes
    top = max(s.usage_bytes for s in samples)
    if span <= 0 or last < top * 0.98 or last - first < PLATEAU_MIN_RISE_SHARE * last:
        return None
    tail = samples[-max(2, len(samples) // 3) :]
    tail_span = tail[-1].t_seconds - tail[0].t_seconds
    if tail_span <= 0:
        return None
    rate = (last - first) / span
    if (tail[-1].usage_bytes - tail[0].usage_bytes) / tail_span < PLATEAU_MIN_TAIL_RATE * rate:
        return None  # it was levelling off: the window says something about the peak
    head = samples[: max(2, len(samples) // 2)]
    head_span = head[-1].t_seconds - head[0].t_seconds
    if head_span <= 0 or (head[-1].usage_bytes - head[0].usage_bytes) / head_span < (
        PLATEAU_MIN_HEAD_RATE * rate
    ):
        return None  # flat, then a jump: a spike (its own finding), not steady growth
    return (
        f"Memory grew without levelling off for the {span:.0f} s it was watched"
        f" ({fmt_bytes(first)} to {fmt_bytes(last)}, {len(samples)} samples): a larger limit may"
        " only delay the kill; watch it longer, or find what grows, before sizing a limit."
    )


def _on_kubernetes(incident: Incident) -> bool:
    paths = (incident.oom_memcg or "", incident.task_memcg or "", incident.group_cgroup or "")
    return bool(incident.pod_uid or incident.k8s or any("kubepods" in p for p in paths))


def _besteffort_bytes(incident: Incident) -> int | None:
    """RSS of the task table's BestEffort processes (kubelet gives them oom_score_adj 1000)."""
    page = page_bytes(incident)
    rows = [t for t in incident.tasks if t.oom_score_adj == BESTEFFORT_SCORE_ADJ]
    total = sum(t.rss_pages * page for t in rows if t.rss_pages is not None)
    return total or None
