"""The sizes advice is computed from: what the cgroup used at the kill (its usage, else its
charge per the memcg stats; the killed processes' RSS only where no cgroup usage can stand
for the workload), the sampled peak and median, and whether the sampled window levelled
off at all.  Rounded up to Mi; `manifest_values` is the sentence to paste into a spec.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from oomwatch.diagnosis.evidence import (
    charged_bytes,
    own_usage_bytes,
    usage_bytes,
    victim_rss_bytes,
)
from oomwatch.diagnosis_codes import Recommendation, SizingBasis
from oomwatch.incident import Incident
from oomwatch.units import MIB, fmt_bytes, quantity

__all__ = [
    "NODE_SCOPES",
    "manifest_values",
    "no_plateau",
    "on_kubernetes",
    "round_up_mi",
    "workload_sizes",
]

NODE_SCOPES = ("node", "qos", "global")
# A sampled window "shows no plateau" when it rose by this share of the usage at its end, its
# last third still rose at this share of the whole window's rate (`no_plateau`) ...
PLATEAU_MIN_SAMPLES = 4
PLATEAU_MIN_RISE_SHARE = 0.1
PLATEAU_MIN_TAIL_RATE = 0.5
PLATEAU_MIN_HEAD_RATE = 0.25  # and its first half rose too: growth throughout, not a spike


def round_up_mi(value: float) -> int:
    return math.ceil(value / MIB) * MIB


def manifest_values(limit: int | None = None, request: int | None = None) -> str:
    """The sizes advised, as the values a container's spec takes: prose reads human sizes,
    and this sentence, set apart, is what to paste (`resources.limits.memory: 8411Mi`)."""
    fields = [("limits", limit), ("requests", request)]
    shown = [f"`resources.{name}.memory: {quantity(v)}`" for name, v in fields if v is not None]
    return f" In the container's spec: {', '.join(shown)}." if shown else ""


def _rss_sizes_the_workload(incident: Incident) -> bool:
    """The killed processes' RSS stands for their workload only where no cgroup usage can:
    a global or node/QoS-level kill (the pod's share), and only if the kernel killed the
    process it selected (pre-5.1 kernels may sacrifice a small child instead)."""
    if incident.kind == "memcg" and incident.limit_scope not in NODE_SCOPES:
        return False
    victim = incident.victim
    return victim is not None and incident.selected_pid in (None, victim.pid)


def _charged_source(incident: Incident, charged: int) -> str:
    swap = (incident.memcg_stats or {}).get("swap")
    text = f"the {fmt_bytes(charged)} charged at the kill per the memcg stats"
    return text + (f", with {fmt_bytes(swap)} more in swap" if swap else "")


def median(values: Iterable[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count), as
    `statistics.median` gives it; that module (with `fractions`, `decimal` and `random`)
    would be imported by the agent's first kill with a timeline, inside its latency."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def workload_sizes(incident: Incident) -> tuple[int, int | None, SizingBasis] | None:
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
    request = None
    if samples:
        request = round_up_mi(median(s.usage_bytes for s in samples))
    window = samples[-1].t_seconds - samples[0].t_seconds if len(samples) > 1 else None
    basis: SizingBasis = {
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


def add_basis(rec: Recommendation, basis: SizingBasis) -> None:
    """Put the basis's keys into `rec`, in their order (a key at a time: mypy does not let
    one TypedDict update another whose keys are required)."""
    rec["usage_at_kill_bytes"] = basis["usage_at_kill_bytes"]
    rec["peak_bytes"] = basis["peak_bytes"]
    rec["peak_source"] = basis["peak_source"]
    rec["window_seconds"] = basis["window_seconds"]
    rec["samples"] = basis["samples"]
    rec["based_on"] = basis["based_on"]


def no_plateau(incident: Incident) -> str | None:
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


def on_kubernetes(incident: Incident) -> bool:
    paths = (incident.oom_memcg or "", incident.task_memcg or "", incident.group_cgroup or "")
    return bool(incident.pod_uid or incident.k8s or any("kubepods" in p for p in paths))
