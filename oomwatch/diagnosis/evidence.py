"""Numbers the findings share, each derived only from what an incident actually says.

Every helper returns `None` when the evidence is missing, so a finding that needs it does not
fire; the kernel's own units are converted here once (kB, pages) so findings speak bytes.
"""

from __future__ import annotations

from oomwatch.decode.tasks import row_for
from oomwatch.incident import Incident, TaskRow, Victim
from oomwatch.sanitize import escape_control

DEFAULT_PAGE_BYTES = 4096


def duration(seconds: float) -> str:
    """`4m05s`, `50s`, `1h02m`."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.0f} %" if whole else "?"


def usage_bytes(incident: Incident) -> int | None:
    """Charged memory of the OOMing memcg when the kernel printed it."""
    return incident.memcg.usage_bytes if incident.memcg is not None else None


def own_usage_bytes(incident: Incident) -> int | None:
    """The report's usage when the OOMing memcg is the victim's own cgroup (the one sampled).

    It is exact at the kill, where a timeline sampled every second can miss the last burst.
    """
    if not incident.oom_memcg or incident.oom_memcg != incident.task_memcg:
        return None
    return usage_bytes(incident)


def limit_bytes(incident: Incident) -> int | None:
    """The memcg limit that was hit, or None (not printed, or no limit)."""
    return incident.memcg.limit_bytes if incident.memcg is not None else None


def charged_bytes(incident: Incident) -> int | None:
    """What the breakdown shares are measured against: memcg usage, else the breakdown's sum."""
    usage = usage_bytes(incident)
    if usage:
        return usage
    parts = incident.breakdown_bytes
    if parts is None or parts.anon is None or parts.file is None:
        return None
    total = parts.anon + parts.file + (parts.kernel or 0)
    return total or None


def victim_rss_bytes(victim: Victim) -> int | None:
    parts = [victim.anon_rss_bytes, victim.file_rss_bytes, victim.shmem_rss_bytes]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def victim_row(incident: Incident) -> TaskRow | None:
    """The victim's row in the task table (matched by pid, then by tgid)."""
    victim = incident.victim
    return row_for(incident.tasks, victim.pid) if victim is not None else None


def page_bytes(incident: Incident) -> int:
    """The task table's page size as the report showed it (`page_size_bytes`, read by the
    decoder); x86's 4 KiB only where the report does not say."""
    return incident.page_size_bytes or DEFAULT_PAGE_BYTES


def task_rss_bytes(task: TaskRow, page: int) -> int | None:
    if task.rss_pages is not None:
        return task.rss_pages * page
    parts = [task.rss_anon_pages, task.rss_file_pages, task.rss_shmem_pages]
    known = [p for p in parts if p is not None]
    return sum(known) * page if known else None


def where(incident: Incident) -> str:
    """Who owned the memory, in the words a reader searches for: pod/container, else cgroup."""
    ctx = incident.k8s
    if ctx is not None and ctx.pod:
        name = f"{ctx.namespace}/{ctx.pod}" if ctx.namespace else ctx.pod
        text = f"pod {name}" + (f" container {ctx.container}" if ctx.container else "")
    elif incident.pod_uid:
        cid = f" container {incident.container_id[:12]}" if incident.container_id else ""
        text = f"pod uid {incident.pod_uid}{cid}"
    elif incident.attribution is not None and incident.attribution.ambiguous:
        text = incident.attribution.describe()  # no pod is charged: name every candidate
    else:
        path = incident.task_memcg or incident.group_cgroup or incident.oom_memcg
        text = f"cgroup {path}" if path else claimed_where(incident) or "an unknown cgroup"
    return escape_control(text)


def claimed_where(incident: Incident) -> str | None:
    """`claimed pod ml/trainer-0 container trainer (unverified)`: who a probe file says
    wrote it, where nothing vouched for it (oomwatch.probe.identity); None without a claim."""
    alloc = incident.allocator or {}
    claim = alloc.get("claimed")
    if not isinstance(claim, dict) or alloc.get("identity") != "unverified":
        return None
    namespace, pod, container = (claim.get(k) for k in ("namespace", "pod", "container"))
    pod_uid = claim.get("pod_uid")
    if isinstance(pod, str) and pod:
        name = f"{namespace}/{pod}" if isinstance(namespace, str) and namespace else pod
    elif isinstance(pod_uid, str) and pod_uid:
        name = f"uid {pod_uid}"
    else:
        return None
    text = f"claimed pod {name}"
    if isinstance(container, str) and container:
        text += f" container {container}"
    return text + " (unverified)"


def charged_where(incident: Incident) -> str:
    """Whose memory a report's breakdown describes, as `charged to ...` or `in use on the
    node` (a global OOM prints the node's meminfo); the OOMing cgroup where that is not the
    victim's own cgroup."""
    if incident.kind == "global":
        return "in use on the node"
    oom = incident.oom_memcg
    if oom and incident.task_memcg and oom != incident.task_memcg:
        return escape_control(f"charged to cgroup {oom}")
    return f"charged to {where(incident)}"


def who(incident: Incident) -> str:
    """The primary victim as `comm (pid N)`, escaped: process names are chosen by the pod."""
    victim = incident.victim
    if victim is None:
        return "an unknown process"
    return f"{escape_control(victim.comm)} (pid {victim.pid})"
