"""Who was killed and how: a victim picked by oom_score_adj, a child killed while the
container lived on, a whole-group kill, and a kill whose report the kernel rate-limited.
"""

from __future__ import annotations

from oomwatch.diagnosis.evidence import page_bytes, task_rss_bytes, victim_row, where, who
from oomwatch.incident import Finding, Incident
from oomwatch.sanitize import escape_control
from oomwatch.units import fmt_bytes

KUBELET_SCORE_ADJ = (
    "kubelet sets oom_score_adj per QoS class: Guaranteed -997, BestEffort 1000, Burstable"
    " 1000 - 1000 × request / node memory (clamped to 2..999), so a process with a smaller"
    " request is preferred as victim"
)


def score_adj_victim(incident: Incident) -> Finding | None:
    """The victim was not the largest task; its higher oom_score_adj chose it."""
    row = victim_row(incident)
    if row is None or row.oom_score_adj is None:
        return None
    page = page_bytes(incident)
    victim_rss = task_rss_bytes(row, page)
    others = [
        (t, rss)
        for t in incident.tasks
        if t is not row
        and t.oom_score_adj is not None
        and (rss := task_rss_bytes(t, page)) is not None
    ]
    if victim_rss is None or not others:
        return None
    largest, largest_rss = max(others, key=lambda pair: pair[1])
    assert largest.oom_score_adj is not None
    if largest_rss <= victim_rss or row.oom_score_adj <= largest.oom_score_adj:
        return None
    message = (
        f"{who(incident)} held {fmt_bytes(victim_rss)} but oom_score_adj {row.oom_score_adj}"
        f" made it the victim over {escape_control(largest.name)} (pid {largest.pid}) with"
        f" {fmt_bytes(largest_rss)} and oom_score_adj {largest.oom_score_adj}; {KUBELET_SCORE_ADJ}."
    )
    evidence = {
        "victim_pid": row.pid,
        "victim_rss_bytes": victim_rss,
        "victim_oom_score_adj": row.oom_score_adj,
        "largest_pid": largest.pid,
        "largest_rss_bytes": largest_rss,
        "largest_oom_score_adj": largest.oom_score_adj,
    }
    return Finding("score-adj-victim", "warning", message, evidence)


def child_process_kill(incident: Incident) -> Finding | None:
    """The kernel killed a process but its container kept running: nothing in Kubernetes."""
    if incident.container_survived is not True or incident.group_kill:
        return None
    if incident.container_id is None and incident.pod_uid is None:
        return None  # a plain cgroup (a systemd service): there is no container to survive
    message = (
        f"{who(incident)} was killed but {where(incident)} kept running (another process, e.g."
        " its main process, survived): Kubernetes records no OOMKilled and no restart, so only"
        " the node's kernel log shows it; the application may be silently degraded."
    )
    evidence = {
        "container_survived": True,
        "victim_pid": incident.victim.pid if incident.victim else None,
    }
    return Finding("child-process-kill", "warning", message, evidence)


def group_kill(incident: Incident) -> Finding | None:
    if not incident.group_kill:
        return None
    pids = [v.pid for v in incident.victims]
    message = (
        f"memory.oom.group is set on {escape_control(incident.group_cgroup or '?')}, so the"
        f" kernel killed all {len(pids)} of its processes, not just {who(incident)}; kubelet"
        " sets it on cgroup v2 since Kubernetes 1.28, and from 1.32 the kubelet setting"
        " singleProcessOOMKill: true restores killing a single process."
    )
    evidence = {"group_cgroup": incident.group_cgroup, "victim_pids": pids}
    return Finding("group-kill", "info", message, evidence)


def rate_limited_report(incident: Incident) -> Finding | None:
    if not (incident.header_suppressed or incident.kmsg_missing):
        return None
    if incident.kmsg_missing:
        what = "the kernel log has no line for this kill (only the cgroup's oom_kill counter)"
    else:
        what = "only its `Killed process` line reached the log"
    message = (
        f"The kernel rate-limited this report (at most 10 full reports per 5 s): {what}, so"
        " the memory breakdown, the task table and the limit numbers are unknown."
    )
    evidence = {
        "header_suppressed": incident.header_suppressed,
        "kmsg_missing": incident.kmsg_missing,
    }
    return Finding("rate-limited-report", "info", message, evidence)


def panic_clause(incident: Incident) -> str | None:
    """How an OOM that killed nothing ended in a kernel panic, as a verdict's clause; None
    when the report shows no panic (the decoder keeps the kernel's end lines as notes)."""
    panic, no_victims = _panic(incident)
    if panic is None:
        return None
    if _panic_on_oom(panic):
        return "the node panicked instead of killing (vm.panic_on_oom): every pod on it went down"
    if no_victims:
        return "found nothing it could kill, so the node panicked and every pod on it went down"
    return "the node panicked: every pod on it went down"


def node_panic(incident: Incident) -> Finding | None:
    """An OOM that ended in a kernel panic: the node, not one container, went down."""
    if incident.victim is not None:
        return None
    panic, no_victims = _panic(incident)
    if panic is None:
        return None
    said = escape_control(panic)
    if _panic_on_oom(panic):
        why = (
            "vm.panic_on_oom is set, so the kernel panics instead of killing: the node went"
            " down with every pod on it, where a kill would have cost one process; unset it"
            " (0) unless a reboot is what this node should do, and find what filled memory"
        )
    elif no_victims:
        why = (
            "the OOM killer found nothing it could kill (what filled memory was unkillable:"
            " kernel memory, or processes at oom_score_adj -1000), so the node went down with"
            " every pod on it; no limit on a killable pod would have helped: find what held the"
            " memory"
        )
    else:
        why = "the node went down with every pod on it"
    message = f"The OOM ended in a kernel panic ({said!r}): {why}."
    evidence = {"panic": said, "panic_on_oom": _panic_on_oom(panic), "no_killable": no_victims}
    return Finding("node-panic", "critical", message, evidence)


def _panic(incident: Incident) -> tuple[str | None, bool]:
    notes = incident.notes
    panic = next((n for n in notes if n.startswith("Kernel panic - not syncing")), None)
    return panic, any(n.startswith("Out of memory and no killable processes") for n in notes)


def _panic_on_oom(panic: str) -> bool:
    return "panic_on_oom" in panic or panic.rstrip(". ").endswith("not syncing: Out of memory")
