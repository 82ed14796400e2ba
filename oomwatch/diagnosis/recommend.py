"""What to change, from evidence: request ≈ median sampled usage, limit ≈ max(usage at kill,
peak) + a stated buffer, rounded up to Mi — or, when memory grows without bound, say that a
larger limit only postpones the next kill.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from oomwatch.diagnosis.evidence import MIB, own_usage_bytes, usage_bytes, victim_rss_bytes
from oomwatch.incident import Finding, Incident

DEFAULT_BUFFER_PERCENT = 20
KERNEL_KILL_KINDS = ("memcg", "global", "cpuset", "mempolicy", "unknown")
GROWTH_CODES = ("leak-trend",)


def round_up_mi(value: float) -> int:
    return math.ceil(value / MIB) * MIB


def quantity(value: int) -> str:
    """Bytes as a Kubernetes quantity, in Mi (what `resources.limits.memory` takes)."""
    return f"{value // MIB}Mi"


def recommend(
    incident: Incident, findings: Sequence[Finding], buffer_percent: int = DEFAULT_BUFFER_PERCENT
) -> dict[str, Any] | None:
    """The recommendation dict for `incident.recommendation`, or None when nothing supports one."""
    codes = {f.code for f in findings}
    if incident.kind == "framework":
        return {
            "action": "reduce-device-memory",
            "limit_will_not_help": True,
            "message": (
                "A container memory limit does not govern device memory: lower the batch size or"
                " model footprint, or fix fragmentation (expandable_segments) if it shows."
            ),
        }
    if incident.kind not in (*KERNEL_KILL_KINDS, "eviction"):
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
    sizes = _sizes(incident)
    if sizes is None:
        return None
    base, request, basis = sizes
    limit = round_up_mi(base * (1 + buffer_percent / 100))
    scope = incident.limit_scope
    if scope == "pod":
        target = "the pod's containers' memory limits to at least a total of"
    elif incident.container_id or incident.pod_uid:
        target = "the container's memory limit to at least"
    else:
        target = "a memory limit on this workload's cgroup of at least"
    message = f"Set {target} {quantity(limit)}"
    message += f" ({buffer_percent} % above {basis['peak_source']})"
    if request is not None:
        message += f" and the request to about {quantity(request)} (median of sampled usage)"
    if scope in ("node", "qos", "global") or incident.kind in ("global", "eviction"):
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
        "message": message + ".",
    }


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
    if at_kill is None and incident.limit_scope in ("container", "pod", "cgroup"):
        at_kill = usage_bytes(incident)
    elif at_kill is None:
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
            else "the usage printed in the kill report only (no sampled timeline)"
        ),
    }
    return base, request, basis
