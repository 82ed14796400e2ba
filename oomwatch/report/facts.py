"""What one incident's report says, as labelled rows and tables that both the text and the
HTML report render, so the page shows exactly what the terminal shows.

Values are the raw strings (names as the workload chose them); each renderer escapes them
its own way (`escape_control` for the terminal, HTML escaping on top for the page).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oomwatch.diagnosis.evidence import (
    charged_bytes,
    claimed_where,
    duration,
    limit_bytes,
    page_bytes,
    pct,
    task_rss_bytes,
    usage_bytes,
    victim_rss_bytes,
)
from oomwatch.incident import Incident, Victim, is_constrained_kill
from oomwatch.units import fmt_bytes

LARGEST_TASKS = 8
MAX_NOTES = 5
_KIND_WORDS = {
    "memcg": "cgroup limit kill",
    "global": "node-wide (global) kill",
    "framework": "framework (device memory) OOM",
    "eviction": "kubelet memory-pressure eviction",
    "false_oomkilled": "OOMKilled without a kernel kill",
}


@dataclass(frozen=True, slots=True)
class Table:
    """A small table: its title, column names, and rows of cells (all text)."""

    title: str
    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]


def kind_words(kind: str) -> str:
    return _KIND_WORDS.get(kind, f"{kind} kill")


def headline_kind(incident: Incident) -> str:
    """What the incident's heading calls it: a report that killed nothing is not a "kill"."""
    if incident.verdict_code == "node-panic":
        return "OOM ending in a kernel panic (the node went down)"
    if incident.verdict_code == "no-kill":
        scope = {"memcg": "cgroup limit OOM", "global": "node-wide (global) OOM"}
        return f"{scope.get(incident.kind, 'OOM')}, no kill in this log"
    return kind_words(incident.kind)


def when(incident: Incident) -> str:
    parts = []
    if incident.wall_time:
        inferred = incident.year_inferred_from
        # a year the log did not print is marked as inferred, with what gave it
        parts.append(incident.wall_time + (f" (year inferred: {inferred})" if inferred else ""))
    if incident.kernel_time_s is not None:
        parts.append(f"{incident.kernel_time_s:.6f} s after boot")
    if incident.kmsg_seq is not None:
        parts.append(f"kmsg seq {incident.kmsg_seq}")
    return ", ".join(parts) or "time unknown"


def _where(incident: Incident) -> list[tuple[str, str]]:
    rows = []
    ctx = incident.k8s
    if ctx is not None and ctx.pod:
        name = f"{ctx.namespace}/{ctx.pod}" if ctx.namespace else ctx.pod
        rows.append(("pod", name + (f" container {ctx.container}" if ctx.container else "")))
    attribution = incident.attribution
    if attribution is not None and attribution.confidence != "certain":
        what = attribution.describe() if attribution.candidates else "unknown"
        rows.append(("pod", f"{what} ({attribution.confidence}: {attribution.reason})"))
    if incident.pod_uid or incident.container_id:
        facts = [
            f"pod uid {incident.pod_uid}" if incident.pod_uid else None,
            f"container {incident.container_id}" if incident.container_id else None,
            incident.qos_class,
            incident.cgroup_driver,
            incident.runtime,
        ]
        rows.append(("identity", ", ".join(f for f in facts if f)))
    if incident.task_memcg:
        rows.append(("cgroup", incident.task_memcg))
    if incident.oom_memcg and incident.oom_memcg != incident.task_memcg:
        rows.append(("oom memcg", incident.oom_memcg))
    if ctx is None and (claim := claimed_where(incident)) is not None:
        rows.append(("pod", claim))  # a probe file's claim nothing vouched for
    return rows


def victim_text(victim: Victim) -> str:
    text = f"{victim.comm} (pid {victim.pid}"
    text += f", uid {victim.uid})" if victim.uid is not None else ")"
    text += f" anon-rss {fmt_bytes(victim.anon_rss_bytes)}"
    text += f" file-rss {fmt_bytes(victim.file_rss_bytes)}"
    text += f" shmem-rss {fmt_bytes(victim.shmem_rss_bytes)}"
    text += f" total-vm {fmt_bytes(victim.total_vm_bytes)}"
    if victim.oom_score_adj is not None:
        text += f" oom_score_adj {victim.oom_score_adj}"
    return text


def limit_text(incident: Incident) -> str | None:
    """The limit line: which limit, usage against it, failcnt, swap and kmem."""
    memcg = incident.memcg
    scope = incident.limit_scope or "unknown"
    if incident.kind == "global":
        constraint = f", {incident.constraint}" if incident.constraint else ""
        return f"node memory (global OOM{constraint})"
    if is_constrained_kill(incident.kind):
        return f"{incident.kind} constraint ({incident.constraint or '?'})"
    if memcg is None:
        return f"{scope} limit (numbers not in the report)" if incident.limit_scope else None
    usage, limit = usage_bytes(incident), limit_bytes(incident)
    words = {"node": "node allocatable", "cgroup": "cgroup"}.get(scope, scope)
    text = f"{words} limit {fmt_bytes(limit) if limit else 'none'}, usage {fmt_bytes(usage)}"
    if usage and limit:
        text += f" ({pct(usage, limit)})"
    if memcg.failcnt is not None:
        text += f", failcnt {memcg.failcnt}"
    if memcg.swap_usage_bytes is not None:
        text += f"; swap {fmt_bytes(memcg.swap_usage_bytes)}"
        if memcg.swap_limit_bytes is not None:
            text += f" of {fmt_bytes(memcg.swap_limit_bytes)}"
    if memcg.kmem_usage_bytes is not None:
        text += f"; kmem {fmt_bytes(memcg.kmem_usage_bytes)}"
    return text


def breakdown(incident: Incident) -> str | None:
    parts = incident.breakdown_bytes
    if parts is None:
        return None
    whole = charged_bytes(incident)
    shown = []
    for name in ("anon", "file", "shmem", "thp", "kernel"):
        value = getattr(parts, name)
        share = f" ({pct(value, whole)})" if value is not None and whole else ""
        shown.append(f"{name} {fmt_bytes(value)}{share}")
    return " · ".join(shown) + "   (shmem is part of file, thp part of anon)"


def tasks(incident: Incident) -> Table | None:
    """The largest tasks of the report's task table, by RSS."""
    if not incident.tasks:
        return None
    page = page_bytes(incident)
    ranked = sorted(incident.tasks, key=lambda t: -(task_rss_bytes(t, page) or 0))
    rows = []
    for task in ranked[:LARGEST_TASKS]:
        vm = task.total_vm_pages * page if task.total_vm_pages is not None else None
        adj = "?" if task.oom_score_adj is None else str(task.oom_score_adj)
        rows.append(
            (str(task.pid), fmt_bytes(task_rss_bytes(task, page)), fmt_bytes(vm), adj, task.name)
        )
    title = f"largest tasks ({len(rows)} of {len(ranked)})"
    return Table(title, ("pid", "rss", "total-vm", "adj", "name"), rows)


def members(incident: Incident) -> Table | None:
    """Every process killed with the first (a memory.oom.group kill, or several kills)."""
    if len(incident.victims) < 2:
        return None
    rows = []
    for victim in incident.victims[1:]:
        rss = victim_rss_bytes(victim)
        rows.append((str(victim.pid), fmt_bytes(rss) if rss else "?", victim.comm))
    title = f"also killed ({len(rows)})"
    if incident.victims_omitted:
        title = f"also killed ({incident.victim_count - 1}; the largest {len(rows)} listed)"
    return Table(title, ("pid", "rss", "name"), rows)


def timeline(incident: Incident) -> str | None:
    samples = incident.timeline.samples if incident.timeline else []
    if incident.timeline is None or not samples:
        return None
    span = samples[-1].t_seconds - samples[0].t_seconds
    usages = [s.usage_bytes for s in samples]
    peak = incident.timeline.peak_bytes or max(usages)
    text = f"{len(samples)} samples over {span:.0f} s: min {fmt_bytes(min(usages))},"
    text += f" last {fmt_bytes(usages[-1])}, peak {fmt_bytes(peak)}"
    if (growth := incident.timeline.growth_bytes_per_second) is not None:
        text += f", growth {fmt_bytes(growth)}/s"
    return text


def forecast_text(incident: Incident) -> str | None:
    """Was the kill predicted (a MemoryLimitApproaching warning), how early, and what it said;
    unwarned, why the forecast held back."""
    record = incident.forecast
    if record is None:
        return None
    if not record.predicted:
        return f"no warning before the kill ({record.reason or 'no forecast'})"
    lead = duration(record.lead_time_seconds) if record.lead_time_seconds is not None else "?"
    said = record.seconds_to_oom_at_warning
    parts = [f"warned {lead} before the kill (MemoryLimitApproaching at {record.warned_at}"]
    if said is not None:
        parts.append(f"predicted {duration(said)}")
    if record.confidence_level:
        parts.append(f"confidence {record.confidence_level} {record.confidence or 0:.2f}")
    text = ", ".join(parts) + ")"
    return text + (f"; growing: {record.growing}" if record.growing else "")


def advice(incident: Incident) -> list[tuple[str, str]]:
    """The recommendation in full, and what it rests on."""
    rec = incident.recommendation or {}
    rows = []
    if rec.get("message"):
        rows.append(("advice", str(rec["message"])))
    if isinstance(based_on := rec.get("based_on"), str):
        rows.append(("based on", based_on))
    return rows


def facts(incident: Incident) -> list[tuple[str, str]]:
    """Where, who, which limit and who asked: the rows the verdict is built on."""
    rows = _where(incident)
    if incident.victims:
        rows.append(("victim", victim_text(incident.victims[0])))
    if incident.group_kill:
        rows.append(("group", f"memory.oom.group kill of {incident.group_cgroup or '?'}"))
    if (limit := limit_text(incident)) is not None:
        rows.append(("limit", limit))
    if (warned := forecast_text(incident)) is not None:
        rows.append(("forecast", warned))
    inv = incident.invoker
    if inv is not None:
        fields = (
            ("gfp_mask", inv.gfp_mask),
            ("order", inv.order),
            ("oom_score_adj", inv.oom_score_adj),
        )
        pid = f" (pid {inv.pid})" if inv.pid is not None else ""
        shown = " ".join(f"{k}={v}" for k, v in fields if v is not None)
        rows.append(("invoker", f"{inv.comm or '?'}{pid} {shown}"))
    if (allocator := allocator_text(incident.allocator)) is not None:
        rows.append(("allocator", allocator))
    return rows


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _size(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    ok = isinstance(value, int) and not isinstance(value, bool)
    return fmt_bytes(value) if ok else None


def allocator_text(alloc: dict[str, Any] | None) -> str | None:
    """The trainer probe's view joined to the kill or OOM: framework and device, where in
    training, the allocator at its last sample, and the CUDA snapshot's free blocks."""
    if not alloc:
        return None
    parts = [
        " ".join(str(alloc[k]) for k in ("framework", "device") if alloc.get(k)) or "trainer probe"
    ]
    where = [
        f"{k} {alloc[k]}"
        for k in ("phase", "epoch", "step", "batch_size")
        if alloc.get(k) is not None
    ]
    if where:
        parts.append(" ".join(where))
    last = _dict(alloc.get("last_sample"))
    cuda = _dict(last.get("cuda"))
    figures = [
        f"{label} {value}"
        for label, value in (
            ("process rss", _size(last, "rss_bytes")),
            ("allocated", _size(cuda, "allocated_bytes") or _size(alloc, "allocated_bytes")),
            ("reserved", _size(cuda, "reserved_bytes")),
            ("asked for", _size(alloc, "requested_bytes")),
            ("device free", _size(alloc, "free_bytes")),
        )
        if value
    ]
    if figures:
        parts.append(", ".join(figures))
    snap = _dict(alloc.get("snapshot"))
    if snap:
        parts.append(
            f"snapshot: {snap.get('segments')} segments, {_size(snap, 'reserved_bytes')}"
            f" reserved, largest free block {_size(snap, 'largest_free_block_bytes')},"
            f" fragmentation {snap.get('fragmentation')}"
        )
    return "; ".join(parts)
