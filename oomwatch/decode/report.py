"""An OOM report being assembled, and how it becomes the final `Incident`.

The assembler fills a `ReportState` line by line; `finish` then settles what needs the
whole report: the kind, the time stamp, the breakdown, a victim known only from the
summary line, and the cross-checks between kill lines, task table and summary.

Time of an incident: `kernel_time_s`, `wall_time` and `kmsg_seq` are those of the primary
`Killed process` line (never rate limited, so a kill decoded from a full report and from a
bare line gets the same key), or of the first line when nothing was killed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oomwatch.decode.lines import OomKillLine
from oomwatch.decode.records import LogRecord
from oomwatch.decode.stats import is_byte_stat, memcg_breakdown, node_breakdown
from oomwatch.incident import Incident, IncidentKind, TaskRow, Victim
from oomwatch.sanitize import escape_control

# Report stages in the order the kernel prints them.
HEADER, TASK_IN, MEMINFO, TASKS, SUMMARY, SELECT, KILLED, GROUP = range(8)

_KINDS: dict[str, IncidentKind] = {
    "CONSTRAINT_MEMCG": "memcg",
    "CONSTRAINT_CPUSET": "cpuset",
    "CONSTRAINT_MEMORY_POLICY": "mempolicy",
    "CONSTRAINT_NONE": "global",
}


@dataclass
class ReportState:
    """An incident being assembled, with the parser state that goes with it."""

    first: LogRecord
    incident: Incident = field(default_factory=Incident)
    stage: int = HEADER
    last_time_s: float | None = None
    seen: set[tuple[object, ...]] = field(default_factory=set)
    header_evidence: bool = False
    columns: list[str] | None = None
    in_stats: bool = False
    line_stats: dict[str, int] = field(default_factory=dict)
    inline_first: dict[str, int] | None = None
    inline_sum: dict[str, int] = field(default_factory=dict)
    nodes: list[dict[str, int]] = field(default_factory=list)
    kill_record: LogRecord | None = None
    kill_message: str | None = None
    summary: OomKillLine | None = None
    memsw: tuple[int, int] | None = None
    mem_info: bool = False
    journal: bool = False  # some line of the report was journalctl-only (continuation)


def _kind(report: ReportState) -> IncidentKind:
    incident = report.incident
    if incident.constraint in _KINDS:
        return _KINDS[incident.constraint]
    message = (report.kill_message or "").lower()  # 2.6 kernels print "Out of Memory"
    if (
        incident.oom_memcg is not None
        or incident.memcg is not None
        or report.inline_first is not None
        or report.line_stats
        or message.startswith("memory cgroup")
    ):
        return "memcg"
    if (
        (report.summary is not None and report.summary.global_oom)
        or message.startswith("out of memory")
        or report.mem_info
    ):
        return "global"
    return "unknown"


def _cross_check(incident: Incident, summary: OomKillLine | None) -> None:
    """Compare the kill lines with the task table and the summary line; fill uid/adj gaps."""
    rows: dict[int, TaskRow] = {row.pid: row for row in incident.tasks}
    for victim in incident.victims:
        row = rows.get(victim.pid)
        if row is None:
            continue
        if row.name != victim.comm:
            incident.notes.append(
                f"task table names pid {victim.pid} {escape_control(row.name)!r} but the kill "
                f"line says {escape_control(victim.comm)!r}"
            )
        if victim.uid is None:
            victim.uid = row.uid
        if victim.oom_score_adj is None:
            victim.oom_score_adj = row.oom_score_adj
    primary = incident.victim
    if summary is None or summary.pid is None or primary is None:
        return
    if summary.pid == primary.pid:
        if primary.uid is None:
            primary.uid = summary.uid
    else:
        incident.notes.append(
            f"oom-kill summary names pid {summary.pid} but the kill line pid {primary.pid} "
            "(thread id vs process id)"
        )


def finish(report: ReportState) -> Incident:
    """The incident a complete (or cut-off) report describes."""
    incident = report.incident
    summary = report.summary
    if not incident.victims and summary is not None and summary.pid is not None:
        incident.victims.append(
            Victim(pid=summary.pid, comm=summary.task or "", uid=summary.uid)
        )
        incident.notes.append("victim known only from the oom-kill: summary line")
    anchor = report.kill_record or report.first
    incident.kernel_time_s = anchor.kernel_time_s
    incident.wall_time = anchor.wall_time
    incident.kmsg_seq = anchor.kmsg_seq
    incident.source_format = report.first.source_format
    if report.journal and incident.source_format == "syslog":
        incident.source_format = "journal"
    if anchor.wall_time is None and anchor.time_text is not None:
        incident.notes.append(
            f"log time {escape_control(anchor.time_text)!r} has no year; wall_time left null"
        )
    incident.kind = _kind(report)
    incident.header_suppressed = bool(incident.victims) and not report.header_evidence
    kmem_kb = incident.memcg.kmem_usage_kb if incident.memcg is not None else None
    if report.line_stats:
        incident.memcg_stats = {k: v for k, v in report.line_stats.items() if is_byte_stat(k)}
        incident.breakdown_bytes = memcg_breakdown(report.line_stats, kmem_kb)
    elif report.inline_first is not None:
        incident.memcg_stats = {
            k: v for k, v in report.inline_first.items() if is_byte_stat(k)
        }
        incident.breakdown_bytes = memcg_breakdown(report.inline_sum, kmem_kb)
    elif report.nodes:
        incident.breakdown_bytes = node_breakdown(report.nodes)
    if report.memsw is not None and incident.memcg is not None:
        memsw_usage_kb, memsw_limit_kb = report.memsw
        usage_kb = incident.memcg.usage_kb or 0
        if memsw_usage_kb >= usage_kb and memsw_usage_kb > 0:
            incident.memcg.swap_usage_kb = memsw_usage_kb - usage_kb
        incident.notes.append(
            f"memory+swap: usage {memsw_usage_kb}kB, limit {memsw_limit_kb}kB"
        )
    _cross_check(incident, summary)
    if not incident.victims:
        incident.notes.append(
            "no kill line: the report ends without a kill (no killable process, or the log "
            "is cut)"
        )
    return incident
