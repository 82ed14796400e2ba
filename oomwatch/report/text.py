"""The human report: one block per incident, every untrusted string escaped.

The issue's order: the verdict line (who, what limit, why, what to do), the findings, the
breakdown, the largest tasks and the timeline; then the facts they rest on (identity,
victims, limit, invoker), what the decoder noted and what is unknown.

Process names, cgroup paths and pod names come from whoever runs the workload; each goes
through `escape_control` so a name cannot move the cursor, clear the screen or fake a line.
"""

from __future__ import annotations

from collections.abc import Sequence

from oomwatch.diagnosis import unknowns, verdict
from oomwatch.diagnosis.evidence import (
    KIB,
    UNLIMITED_BYTES,
    charged_bytes,
    fmt_bytes,
    limit_bytes,
    page_bytes,
    pct,
    task_rss_bytes,
    usage_bytes,
    victim_rss_bytes,
)
from oomwatch.incident import Incident, Victim
from oomwatch.sanitize import escape_control as esc

LARGEST_TASKS = 8
MAX_NOTES = 5
MAX_ALSO = 4  # more killed processes (a group kill) are listed on one line, then counted
_KIND_WORDS = {
    "memcg": "cgroup limit kill",
    "global": "node-wide (global) kill",
    "framework": "framework (device memory) OOM",
    "eviction": "kubelet memory-pressure eviction",
    "false_oomkilled": "OOMKilled without a kernel kill",
}
_LABEL = 10


def kind_words(kind: str) -> str:
    return _KIND_WORDS.get(kind, f"{kind} kill")


def _row(label: str, text: str) -> str:
    return f"  {label:<{_LABEL}} {text}"


def _kb(value: int | None) -> str:
    return fmt_bytes(value * KIB) if value is not None else "?"


def _when(incident: Incident) -> str:
    parts = []
    if incident.wall_time:
        parts.append(esc(incident.wall_time))
    if incident.kernel_time_s is not None:
        parts.append(f"{incident.kernel_time_s:.6f} s after boot")
    if incident.kmsg_seq is not None:
        parts.append(f"kmsg seq {incident.kmsg_seq}")
    return ", ".join(parts) or "unknown"


def _where(incident: Incident) -> list[str]:
    lines = []
    ctx = incident.k8s
    if ctx is not None and ctx.pod:
        name = f"{ctx.namespace}/{ctx.pod}" if ctx.namespace else ctx.pod
        container = f" container {ctx.container}" if ctx.container else ""
        lines.append(_row("pod", esc(name + container)))
    attribution = incident.attribution
    if attribution is not None and attribution.confidence != "certain":
        what = attribution.describe() if attribution.candidates else "unknown"
        lines.append(_row("pod", esc(f"{what} ({attribution.confidence}: {attribution.reason})")))
    if incident.pod_uid or incident.container_id:
        facts = [
            f"pod uid {incident.pod_uid}" if incident.pod_uid else None,
            f"container {incident.container_id}" if incident.container_id else None,
            incident.qos_class,
            incident.cgroup_driver,
            incident.runtime,
        ]
        lines.append(_row("identity", esc(", ".join(f for f in facts if f))))
    if incident.task_memcg:
        lines.append(_row("cgroup", esc(incident.task_memcg)))
    if incident.oom_memcg and incident.oom_memcg != incident.task_memcg:
        lines.append(_row("oom memcg", esc(incident.oom_memcg)))
    return lines


def _victim(victim: Victim) -> str:
    text = f"{esc(victim.comm)} (pid {victim.pid}"
    text += f", uid {victim.uid})" if victim.uid is not None else ")"
    text += f" anon-rss {_kb(victim.anon_rss_kb)} file-rss {_kb(victim.file_rss_kb)}"
    text += f" shmem-rss {_kb(victim.shmem_rss_kb)} total-vm {_kb(victim.total_vm_kb)}"
    if victim.oom_score_adj is not None:
        text += f" oom_score_adj {victim.oom_score_adj}"
    return text


def _limit(incident: Incident) -> str | None:
    memcg = incident.memcg
    scope = incident.limit_scope or "unknown"
    if incident.kind == "global":
        return "node memory (global OOM" + (
            f", {esc(incident.constraint)})" if incident.constraint else ")"
        )
    if incident.kind in ("cpuset", "mempolicy"):
        return f"{incident.kind} constraint ({esc(incident.constraint or '?')})"
    if memcg is None:
        return f"{scope} limit (numbers not in the report)" if incident.limit_scope else None
    usage, limit = usage_bytes(incident), limit_bytes(incident)
    words = {"node": "node allocatable", "cgroup": "cgroup"}.get(scope, scope)
    text = f"{words} limit {fmt_bytes(limit) if limit else 'none'}, usage {fmt_bytes(usage)}"
    if usage and limit:
        text += f" ({pct(usage, limit)})"
    if memcg.failcnt is not None:
        text += f", failcnt {memcg.failcnt}"
    if memcg.swap_usage_kb is not None:
        swap_limit = memcg.swap_limit_kb
        unlimited = swap_limit is not None and swap_limit * KIB >= UNLIMITED_BYTES
        text += f"; swap {_kb(memcg.swap_usage_kb)}"
        if swap_limit is not None:
            text += " of unlimited" if unlimited else f" of {_kb(swap_limit)}"
    if memcg.kmem_usage_kb is not None:
        text += f"; kmem {_kb(memcg.kmem_usage_kb)}"
    return text


def _breakdown(incident: Incident) -> str | None:
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


def _tasks(incident: Incident) -> list[str]:
    if not incident.tasks:
        return []
    page = page_bytes(incident)
    ranked = sorted(incident.tasks, key=lambda t: -(task_rss_bytes(t, page) or 0))
    lines = [f"  largest tasks ({min(LARGEST_TASKS, len(ranked))} of {len(ranked)}):"]
    lines.append(f"    {'pid':>8} {'rss':>10} {'total-vm':>10} {'adj':>5}  name")
    for task in ranked[:LARGEST_TASKS]:
        vm = task.total_vm_pages * page if task.total_vm_pages is not None else None
        adj = "?" if task.oom_score_adj is None else str(task.oom_score_adj)
        lines.append(
            f"    {task.pid:>8} {fmt_bytes(task_rss_bytes(task, page)):>10}"
            f" {fmt_bytes(vm):>10} {adj:>5}  {esc(task.name)}"
        )
    return lines


def _timeline(incident: Incident) -> str | None:
    timeline = incident.timeline
    if timeline is None or not timeline.samples:
        return None
    samples = timeline.samples
    span = samples[-1].t_seconds - samples[0].t_seconds
    usages = [s.usage_bytes for s in samples]
    text = f"{len(samples)} samples over {span:.0f} s: min {fmt_bytes(min(usages))},"
    text += f" last {fmt_bytes(usages[-1])}, peak {fmt_bytes(timeline.peak_bytes or max(usages))}"
    if timeline.growth_bytes_per_second is not None:
        text += f", growth {fmt_bytes(timeline.growth_bytes_per_second)}/s"
    return text


def _also(victims: Sequence[Victim]) -> str:
    """The other processes of a group kill, on one line."""
    shown = []
    for victim in victims[:MAX_ALSO]:
        rss = victim_rss_bytes(victim)
        size = f" rss {fmt_bytes(rss)}" if rss else ""
        shown.append(f"{esc(victim.comm)} (pid {victim.pid}){size}")
    more = f", … {len(victims) - MAX_ALSO} more" if len(victims) > MAX_ALSO else ""
    return f"{len(victims)} more: " + ", ".join(shown) + more


def _facts(incident: Incident) -> list[str]:
    """Where, who, which limit and who asked: the report lines the verdict is built on."""
    out = _where(incident)
    if incident.victims:
        out.append(_row("victim", _victim(incident.victims[0])))
    if len(incident.victims) > 1:
        out.append(_row("also", _also(incident.victims[1:])))
    if incident.group_kill:
        out.append(_row("group", f"memory.oom.group kill of {esc(incident.group_cgroup or '?')}"))
    if (limit := _limit(incident)) is not None:
        out.append(_row("limit", limit))
    inv = incident.invoker
    if inv is not None:
        fields = (
            ("gfp_mask", inv.gfp_mask),
            ("order", inv.order),
            ("oom_score_adj", inv.oom_score_adj),
        )
        pid = f" (pid {inv.pid})" if inv.pid is not None else ""
        shown = " ".join(f"{k}={v}" for k, v in fields if v is not None)
        out.append(_row("invoker", esc(f"{inv.comm or '?'}{pid} {shown}")))
    return out


def render_incident(incident: Incident, index: int, total: int) -> str:
    out = [f"== OOM {index} of {total}: {kind_words(incident.kind)}, {_when(incident)} =="]
    out.append(_row("VERDICT", verdict(incident)))
    if incident.findings:
        out.append("  findings:")
        out.extend(f"    [{f.severity}] {f.code}: {esc(f.message)}" for f in incident.findings)
    rec = incident.recommendation
    if rec and isinstance(rec.get("based_on"), str):
        out.append(_row("based on", esc(rec["based_on"])))
    if (breakdown := _breakdown(incident)) is not None:
        out.append(_row("breakdown", breakdown))
    out.extend(_tasks(incident))
    if (timeline := _timeline(incident)) is not None:
        out.append(_row("timeline", timeline))
    out.extend(_facts(incident))
    if incident.notes:
        out.append("  decoder notes:")
        out.extend(f"    - {esc(note)}" for note in incident.notes[:MAX_NOTES])
        if len(incident.notes) > MAX_NOTES:
            out.append(f"    - … {len(incident.notes) - MAX_NOTES} more (see --json)")
    missing = unknowns(incident)
    if missing:
        out.append("  unknown:")
        out.extend(f"    - {m}" for m in missing)
    return "\n".join(out)


def render(incidents: Sequence[Incident], warnings: Sequence[str], source: str) -> str:
    if not incidents:
        head = f"No OOM kills found in {esc(source)}."
    else:
        head = f"{len(incidents)} OOM incident(s) in {esc(source)}:"
    blocks = [head, *(render_incident(i, n, len(incidents)) for n, i in enumerate(incidents, 1))]
    if warnings:
        blocks.append("warnings:\n" + "\n".join(f"  - {esc(w)}" for w in warnings))
    return "\n\n".join(blocks) + "\n"
