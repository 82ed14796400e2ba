"""An OOM report being assembled, and how it becomes the final `Incident`.

The assembler fills a `ReportState` line by line; `finish` then settles what needs the
whole report: the kind, the time stamp (and its year, from the log's `YearClock`), the
breakdown, the page size, a victim known only from the summary line, and the cross-checks
between kill lines, task table and summary.

Time of an incident: `kernel_time_s`, `wall_time` and `kmsg_seq` are those of the primary
`Killed process` line (never rate limited, so a kill decoded from a full report and from a
bare line gets the same key), or of the first line when nothing was killed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oomwatch.decode import lines as L
from oomwatch.decode.lines import OomKillLine, kib, limit_kib
from oomwatch.decode.records import LogRecord
from oomwatch.decode.stamps import YearClock
from oomwatch.decode.stats import is_byte_stat, memcg_breakdown, node_breakdown
from oomwatch.decode.tasks import PAGE_SIZES_BYTES, page_bytes_from, row_for, row_pages
from oomwatch.incident import Incident, IncidentKind, MemcgUsage, Victim
from oomwatch.sanitize import escape_control
from oomwatch.units import fmt_bytes

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
    victim_pids: set[int] = field(default_factory=set)  # every pid a kill line named
    header_evidence: bool = False
    columns: list[str] | None = None
    in_stats: bool = False
    line_stats: dict[str, int] = field(default_factory=dict)
    inline_first: dict[str, int] | None = None
    inline_sum: dict[str, int] = field(default_factory=dict)
    nodes: list[dict[str, int]] = field(default_factory=list)
    kill_record: LogRecord | None = None
    last_kill_time_s: float | None = None  # the kernel time of the last kill line
    summary_record: LogRecord | None = None
    # The first line with a log prefix (a report's first line may have lost its stamp in a
    # paste): its format is the report's, its time the report's when nothing was killed.
    stamped: LogRecord | None = None
    memcg_trace: bool = False  # the call trace runs through mem_cgroup_out_of_memory()
    kill_message: str | None = None
    summary: OomKillLine | None = None
    memsw: tuple[int, int] | None = None
    mem_info: bool = False
    journal: bool = False  # some line of the report was journalctl-only (continuation)
    page_counts: dict[str, int] = field(default_factory=dict)  # show_mem, in pages
    buddy_page_kb: int | None = None  # order-0 block size of the buddy free lists
    # A task table header after the summary line (pasted from another report): its rows
    # are not this report's.
    foreign_table: bool = False
    # Every line the kernel printed reaches the decoder (the live /dev/kmsg stream, the
    # ring): a kill line without its header then proves the kernel rate-limited it.
    complete_log: bool = True
    clock: YearClock | None = None
    # A header-less kill's /dev/kmsg record follows the previous report's last one (this
    # number) with none between: proof that the kernel rate-limited its header.
    seq_follows: int | None = None


# Kernels 5.0-5.2 print CONSTRAINT_NONE for every OOM: dump_oom_summary() reads
# oc->constraint, which out_of_memory() computed into a local variable until 5.3 ("mm/
# oom_kill.c: fix uninitialized oc->constraint"; compare mm/oom_kill.c of 5.0.1 and 5.3.1).
# A memcg context (oom_memcg=, the memcg kill message, memcg usage or stats) is the stronger
# evidence, as on vendor kernels that backported the summary line without the fix.
_CONSTRAINT_NOTE = (
    "the summary line says CONSTRAINT_NONE but {why} show a memcg OOM: kernels 5.0-5.2 (and"
    " backports) print CONSTRAINT_NONE for every OOM (oc->constraint not set until 5.3)"
)


def add_summary(report: ReportState, summary: OomKillLine) -> None:
    """The `oom-kill:` summary line: constraint and cgroup paths (as printed; `_kind`
    weighs the constraint against the rest of the report)."""
    report.stage = SUMMARY
    report.summary = summary
    report.header_evidence = True
    incident = report.incident
    incident.constraint = summary.constraint if summary.constraint is not None else ""
    if summary.oom_memcg is not None:
        incident.oom_memcg = summary.oom_memcg
    if summary.task_memcg is not None:
        incident.task_memcg = summary.task_memcg


def add_usage(report: ReportState, which: str, usage_kb: int, limit_kb: int) -> None:
    """A `swap:`, `kmem:` or `memory+swap:` line after the memcg's `memory:` line."""
    memcg = report.incident.memcg or MemcgUsage()
    report.incident.memcg = memcg
    if which == "swap":
        memcg.swap_usage_bytes, memcg.swap_limit_bytes = kib(usage_kb), limit_kib(limit_kb)
    elif which == "kmem":
        memcg.kmem_usage_bytes = kib(usage_kb)
    else:
        report.memsw = (usage_kb, limit_kb)


def add_reaped(report: ReportState, pid: int, comm: str, anon_kb: int) -> None:
    """`oom_reaper: reaped process N`: what the reaper left of a victim (or, after a header
    whose kill line is missing, the only sign of the victim)."""
    incident = report.incident
    for victim in incident.victims:
        if victim.pid == pid:
            victim.reaped_anon_rss_bytes = kib(anon_kb)
            return
    if not incident.victims and report.header_evidence:
        incident.victims.append(Victim(pid=pid, comm=comm, reaped_anon_rss_bytes=kib(anon_kb)))
        incident.notes.append(
            f"victim pid {pid} known only from its oom_reaper line (no kill line seen)"
        )


def note_line(report: ReportState, message: str) -> bool:
    """Lines that only add a note to the open report: a task already exiting (the kernel
    skipped it), the kernel's end-of-report lines."""
    if "is already exiting" in message:
        exiting = L.parse_already_exiting(message)
        if exiting is not None:
            report.incident.notes.append(
                f"pid {exiting[0]} ({escape_control(exiting[1])}) was already exiting; "
                "the kernel skipped killing it"
            )
            return True
    if message.startswith(L.OOM_END_LINES):
        report.incident.notes.append(escape_control(message))
        return True
    return False


def add_stats(report: ReportState, path: str, inline: dict[str, int] | None) -> None:
    """`Memory cgroup stats for <path>:` (5.3+: the stat lines follow; ≤5.2: inline, one
    line per memcg of the subtree, the OOMing one first)."""
    report.header_evidence = True
    incident = report.incident
    if inline is None:
        report.in_stats = True
        if incident.oom_memcg is None:
            incident.oom_memcg = path
        return
    if report.inline_first is None:
        report.inline_first = inline
        if incident.oom_memcg is None:
            if incident.memcg is not None:
                incident.oom_memcg = path
            else:
                incident.notes.append(
                    f"memory stats printed for {escape_control(path)} (report fragment: "
                    "the limit-hitting memcg is not named)"
                )
    for name, value in inline.items():
        report.inline_sum[name] = report.inline_sum.get(name, 0) + value


def table_elsewhere(report: ReportState) -> bool:
    """A task table that starts after this report's summary line belongs to another report
    (pasted in): the kernel prints the kill line right after the summary."""
    if report.incident.victims or report.stage <= TASKS:
        return False
    if not report.foreign_table:
        report.incident.notes.append(
            "a task table after the report's summary line was left out (another report's,"
            " pasted in)"
        )
    report.foreign_table = True
    return True


def _memcg_evidence(report: ReportState) -> str | None:
    """What says this report is a memcg OOM, in words; None if nothing does."""
    incident = report.incident
    message = (report.kill_message or "").lower()  # 2.6 kernels print "Out of Memory"
    if report.summary is not None and report.summary.oom_memcg is not None:
        return "oom_memcg="
    if incident.oom_memcg is not None or incident.memcg is not None:
        return "the memcg usage lines"
    if report.inline_first is not None or report.line_stats:
        return "the memcg stats"
    if message.startswith("memory cgroup"):
        return "the kill message"
    if report.memcg_trace:
        return "the call trace (mem_cgroup_out_of_memory)"
    return None


def meminfo_line(report: ReportState, message: str) -> None:
    """A line before the task table of a report without a kill yet: the stack's pid line,
    and for a global OOM show_mem's `Mem-Info:`, page counts, `Node` and buddy lines."""
    # show_mem's first line: `Mem-Info:` (`Mem-info:` in 2.6.1x), or in 2.6.2x kernels that
    # print no such line, the first per-cpu pageset header (`Node 2 DMA per-cpu:`).
    if message.startswith(("Mem-Info", "Mem-info")) or (
        not report.mem_info and message.endswith(" per-cpu:")
    ):
        report.stage = MEMINFO
        report.mem_info = True
        report.header_evidence = True
    elif message.startswith("Node ") and (node := L.parse_node_meminfo(message)) is not None:
        report.nodes.append(node)
    elif report.mem_info and (counts := L.parse_page_counts(message)) is not None:
        report.page_counts.update(counts)
    elif report.mem_info and (page_kb := L.parse_buddy_page_kb(message)) is not None:
        report.buddy_page_kb = report.buddy_page_kb or page_kb
    elif report.stage == HEADER and report.incident.invoker is not None:
        pid = L.parse_cpu_pid(message)
        if pid is not None and report.incident.invoker.pid is None:
            report.incident.invoker.pid = pid
        elif "mem_cgroup_out_of_memory" in message and L.is_memcg_oom_frame(message):
            report.memcg_trace = True


def _kind(report: ReportState) -> IncidentKind:
    incident = report.incident
    memcg_why = _memcg_evidence(report)
    global_oom = report.summary is not None and report.summary.global_oom
    if incident.constraint in _KINDS:
        kind = _KINDS[incident.constraint]
        if kind == "global" and memcg_why is not None and not global_oom:
            incident.notes.append(_CONSTRAINT_NOTE.format(why=memcg_why))
            return "memcg"
        return kind
    if memcg_why is not None:
        return "memcg"
    message = (report.kill_message or "").lower()
    if global_oom or message.startswith("out of memory") or report.mem_info:
        return "global"
    return "unknown"


def _cross_check(incident: Incident, summary: OomKillLine | None) -> None:
    """Compare the kill lines with the task table and the summary line; fill uid/adj gaps."""
    for victim in incident.victims:
        row = row_for(incident.tasks, victim.pid)
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
        incident.victims.append(Victim(pid=summary.pid, comm=summary.task or "", uid=summary.uid))
        incident.notes.append("victim known only from the oom-kill: summary line")
    anchor = report.kill_record or report.summary_record or report.stamped or report.first
    incident.kernel_time_s = anchor.kernel_time_s
    if report.kill_record is not None:
        incident.last_kill_kernel_time_s = report.last_kill_time_s
    incident.wall_time = anchor.wall_time
    incident.kmsg_seq = anchor.kmsg_seq
    incident.source_format = (report.stamped or report.first).source_format
    if report.journal and incident.source_format == "syslog":
        incident.source_format = "journal"
    _date(report, anchor)
    incident.kind = _kind(report)
    headerless = bool(incident.victims) and not report.header_evidence
    incident.header_suppressed = headerless and (
        report.complete_log or report.seq_follows is not None
    )
    if headerless and not report.complete_log:
        incident.notes.append(_headerless_note(report, anchor))
    kmem = incident.memcg.kmem_usage_bytes if incident.memcg is not None else None
    if report.line_stats:
        incident.memcg_stats = {k: v for k, v in report.line_stats.items() if is_byte_stat(k)}
        incident.breakdown_bytes = memcg_breakdown(report.line_stats, kmem)
    elif report.inline_first is not None:
        incident.memcg_stats = {k: v for k, v in report.inline_first.items() if is_byte_stat(k)}
        incident.breakdown_bytes = memcg_breakdown(report.inline_sum, kmem)
    elif report.nodes:
        incident.breakdown_bytes = node_breakdown(report.nodes)
    if report.memsw is not None and incident.memcg is not None:
        memsw_usage_kb, memsw_limit_kb = report.memsw
        usage = incident.memcg.usage_bytes or 0
        if memsw_usage_kb * 1024 >= usage and memsw_usage_kb > 0:
            incident.memcg.swap_usage_bytes = memsw_usage_kb * 1024 - usage
        memsw_limit = limit_kib(memsw_limit_kb)
        memsw_words = "none" if memsw_limit is None else fmt_bytes(memsw_limit)
        incident.notes.append(
            f"memory+swap: usage {fmt_bytes(memsw_usage_kb * 1024)}, limit {memsw_words}"
        )
    _cross_check(incident, summary)
    _page_size(report)
    if not incident.victims and any(n.startswith("Kernel panic") for n in incident.notes):
        incident.notes.append("no kill line: the report ends in a kernel panic")
    elif not incident.victims:
        incident.notes.append(
            "no kill line: the report ends without a kill (no killable process, or the log is cut)"
        )
    return incident


def _headerless_note(report: ReportState, anchor: LogRecord) -> str:
    """Why a saved log has no header for a kill: proven rate-limited, or not known."""
    if report.seq_follows is None:
        return (
            "this log has no report header for the kill (cut, filtered, or rate-limited: the"
            " log alone does not say which)"
        )
    return (
        f"rate-limited: this kill's /dev/kmsg record ({anchor.kmsg_seq}) follows the previous"
        f" report's last one ({report.seq_follows}) with no record between, so the kernel"
        " printed no header for it; the kills came in a burst, and the memcg of the previous"
        " report is likely this one's too, but not proven"
    )


def _date(report: ReportState, anchor: LogRecord) -> None:
    """The incident's year from the log's evidence when its stamp has none (`stamps`)."""
    incident, clock = report.incident, report.clock
    if anchor.wall_time is not None:
        if clock is not None:
            clock.observe_iso(anchor.wall_time)
        return
    if anchor.time_text is None:
        return
    dated = clock.date(anchor.time_text) if clock is not None else None
    if dated is None:
        incident.notes.append(
            f"log time {escape_control(anchor.time_text)!r} has no year and nothing in or about"
            " the log dates it; wall_time left null"
        )
        return
    incident.wall_time = dated.wall_time
    incident.year_inferred_from = dated.source
    incident.notes.append(escape_control(dated.note))


def _page_size(report: ReportState) -> None:
    """`page_size_bytes` from what the report itself says (see `tasks`), else None."""
    incident = report.incident
    size, how = None, ""
    if report.buddy_page_kb is not None and report.buddy_page_kb * 1024 in PAGE_SIZES_BYTES:
        size, how = report.buddy_page_kb * 1024, "the buddy allocator's order-0 blocks"
    if size is None and report.page_counts and report.nodes:
        for key in ("active_anon", "inactive_anon", "active_file", "inactive_file", "shmem"):
            pages = report.page_counts.get(key)
            kb = [node[key] for node in report.nodes if key in node]
            if pages is not None and kb and (size := page_bytes_from(sum(kb), pages)):
                how = f"show_mem's {key} in pages and in kB"
                break
    victim = incident.victim
    row = row_for(incident.tasks, victim.pid) if victim is not None else None
    if size is None and victim is not None and row is not None:
        parts = [victim.anon_rss_bytes, victim.file_rss_bytes, victim.shmem_rss_bytes]
        pages = row_pages(row)
        if pages is not None and any(p is not None for p in parts):
            size = page_bytes_from(sum(p or 0 for p in parts) // 1024, pages)
            how = f"pid {victim.pid}'s kill line in kB against its task row in pages"
    incident.page_size_bytes = size
    if size is not None and size != 4096:
        incident.notes.append(f"pages are {fmt_bytes(size)} here (from {how})")
