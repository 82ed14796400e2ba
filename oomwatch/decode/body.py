"""The open report of the assembler and the lines inside it (oomwatch.decode.assembler).

`ReportBody` holds what the assembler knows between records: the report being filled, the
context lines around reports (orphan task rows, a kill pasted before its header, an early
reaper line, a group kill's tail), and how a report is opened, continued and closed.  It
reads the lines a report holds between its header and its kill: the memcg usage and stats,
the task table, Mem-Info and the stack.  The lines that open, place or close a report
(header, summary, kill, group, reaper) are the assembler's.
"""

from __future__ import annotations

import re

from oomwatch.decode import lines as L
from oomwatch.decode.context import (
    EARLY_KILL_LINES,
    EARLY_KILL_S,
    EarlyReaper,
    GroupTail,
    OrphanRows,
    SequenceWitness,
    SuppressionWitness,
    adopt_early_kill,
)
from oomwatch.decode.lazy_re import lazy_compile
from oomwatch.decode.line_keys import KEY_RE, PRE_TABLE_KEY_RE, REPORT_GAP_S, dedupe_key
from oomwatch.decode.records import LogRecord
from oomwatch.decode.report import (
    HEADER,
    MEMINFO,
    TASK_IN,
    TASKS,
    ReportState,
    add_stats,
    add_usage,
    finish,
    meminfo_line,
    note_line,
    table_elsewhere,
)
from oomwatch.decode.stamps import YearClock
from oomwatch.decode.tasks import infer_layout, parse_header, parse_row
from oomwatch.incident import Incident, MemcgUsage


class ReportBody:
    """The report being assembled and the lines inside it; `ReportAssembler` feeds it."""

    def __init__(self, complete_log: bool = True, clock: YearClock | None = None) -> None:
        """`complete_log`: every line the kernel printed reaches `feed` (the live /dev/kmsg
        stream or its ring), so a kill without its header was rate-limited; False for a log
        someone saved, cut or filtered.  `clock` dates stamps that print no year."""
        self.warnings: list[str] = []
        self.complete_log = complete_log
        self.clock = clock
        self._report: ReportState | None = None
        self._orphans = OrphanRows()
        self._orphan_added = False
        self._witness = SuppressionWitness()
        self._sequence = SequenceWitness()
        self._early_reaper = EarlyReaper()
        # A header-less kill held for the report whose header came right after it (`_start`).
        self._early_kill: ReportState | None = None
        self._group_tail = GroupTail()

    @property
    def open(self) -> bool:
        """True while a report is being assembled."""
        return self._report is not None

    @property
    def open_incident(self) -> Incident | None:
        """The incident being assembled, to look at (e.g. to tell when it is complete)."""
        return None if self._report is None else self._report.incident

    def _keys(self) -> re.Pattern[str] | None:
        """The substrings one of which a line needs to matter now; None: every line may."""
        report = self._report
        if report is None or report.incident.victims or report.stage >= TASKS:
            return KEY_RE
        return None if report.in_stats else PRE_TABLE_KEY_RE

    def _close(self, done: list[Incident]) -> None:
        report, self._report = self._report, None
        early, self._early_kill = self._early_kill, None
        if report is not None and early is not None:
            if report.incident.victims:  # a kill of its own: the early one stands alone
                self._report = early
                self._close(done)
            else:
                adopt_early_kill(report, early)
        if report is not None:
            incident = finish(report)
            done.append(incident)
            self._group_tail.closed(incident, self._sequence.last)
            if not self.complete_log:
                self._witness.note(incident, report.header_evidence)

    def _start(self, record: LogRecord, stage: int, done: list[Incident]) -> ReportState:
        early = self._report if stage == HEADER and self._kill_before(record) else None
        if early is not None:
            self._report = None  # held, not closed: the header that follows may be its own
        self._close(done)
        self._early_kill = early
        report = ReportState(
            first=record,
            stage=stage,
            last_time_s=record.kernel_time_s,
            complete_log=self.complete_log,
            clock=self.clock,
        )
        report.seen.add(dedupe_key(record, record.message))
        rows = self._orphans.take(record.line_no)
        if rows:
            report.incident.tasks.extend(rows)
            report.header_evidence = True
            report.incident.notes.append(
                "task rows without their header: columns inferred from the row width"
            )
        self._report = report
        return report

    def _continue(self, record: LogRecord, stage: int, done: list[Incident]) -> ReportState:
        """The open report if a line of `stage` may still belong to it, else a new one."""
        report = self._report
        if report is None or report.stage > stage or report.incident.victims:
            return self._start(record, stage, done)
        report.stage = stage
        return report

    def _far(self, report: ReportState, record: LogRecord, message: str) -> bool:
        """Whether the line's kernel time is too far from the report's (else it moves on)."""
        return self._far_s(report, record.kernel_time_s)

    def _far_s(self, report: ReportState, now: float | None) -> bool:
        if now is None or report.last_time_s is None:
            if now is not None:
                report.last_time_s = now
            return False
        if now - report.last_time_s > REPORT_GAP_S or now < report.last_time_s - 1.0:
            return True
        report.last_time_s = now
        return False

    def _stats_line(self, message: str) -> bool:
        """A `key value` line of the open report's stats dump, kept: tried before the other
        lines inside a report, none of which looks like one (a `memory...` line aside, which
        `_detail_line` tries as a usage line first)."""
        report = self._report
        if report is None or not report.in_stats or message.startswith("memory"):
            return False
        return _stat_line(report, message)

    def stat_line(self, record: LogRecord, message: str) -> bool:
        """Take one line of `record` that is a `key value` line of the open report's stats
        dump (40-50 of a report's ~80 lines, inside the kill's path): the general path's
        steps without the tests no such line can pass; False, nothing changed, otherwise.

        Taken only where the general path would take the line the same way
        (`_stat_dump`), and only a plain line that no report line or usage line can be
        (no `oom`, no leading `memory`, no newline).
        """
        report = self._stat_dump()
        if report is None or "oom" in message or "\n" in message or message.startswith("memory"):
            return False
        stat = L.parse_stat_line(message)
        if stat is None:
            return False
        kept = self._take_stat(report, dedupe_key(record, message), record.kernel_time_s, *stat)
        if kept and report.stamped is None and record.source_format != "plain":
            report.stamped = record
        return True

    def stat_kmsg(self, raw: bytes) -> tuple[float, str] | None:
        """`stat_line` for a /dev/kmsg record read straight from its bytes, with no
        `LogRecord` made: its kernel time and message when taken, else None (nothing
        changed: parse it and `feed` it).

        Only a record the kernel wrote as `key value` alone (no trailing blank, no escape,
        no dictionary line but after a newline) is taken: its message is then the bytes as
        they are, which `parse_kmsg_record` would make of it too.
        """
        report = self._stat_dump()
        if report is None or report.stamped is None:
            return None
        match = _RAW_STAT.match(raw)
        if match is None:
            return None
        seq_b, usec_b, line_b, key_b, value_b = match.groups()
        message = line_b.decode()
        if "oom" in message or message.startswith("memory"):
            return None
        now_s = int(usec_b) / 1e6
        key = (now_s, None, int(seq_b), None, message)  # `dedupe_key` of its record
        self._take_stat(report, key, now_s, key_b.decode(), int(value_b))
        return now_s, message

    def _stat_dump(self) -> ReportState | None:
        """The open report while the general path would take a `key value` line as one of
        its stats: in its stats dump, before its task table and kill, no orphan rows
        waiting (a line may clear them)."""
        report = self._report
        if (
            report is None
            or not report.in_stats
            or report.stage >= TASKS
            or report.incident.victims
            or self._orphans.rows
        ):
            return None
        return report

    def _take_stat(
        self,
        report: ReportState,
        key: tuple[object, ...],
        now_s: float | None,
        name: str,
        value: int,
    ) -> bool:
        """A stat line as `_line` takes it: a repeat counted once, a line far from the
        report in kernel time dropped (a stat line is no report line); True if kept."""
        if key in report.seen:
            return False
        report.seen.add(key)
        if self._far_s(report, now_s):
            return False
        report.line_stats[name] = value
        return True

    def _detail_line(self, record: LogRecord, message: str, done: list[Incident]) -> None:
        """The lines inside a report: memcg, stats, task table, Mem-Info, stack."""
        if self._note(record, message, done):
            return
        report = self._report
        if message.startswith(("Task in ", "Memory limit reached")):
            task_in = L.parse_task_in(message)
            if task_in is not None:
                report = self._continue(record, TASK_IN, done)
                report.header_evidence = True
                report.incident.task_memcg, report.incident.oom_memcg = task_in
                return
        if message.startswith(("memory", "swap: ", "kmem: ")):
            usage = L.parse_usage(message)
            if usage is not None:
                self._usage(record, usage, done)
                return
        if message.startswith("Memory cgroup stats for "):
            self._stats_header(record, message, done)
            return
        if report is not None and report.in_stats:
            if _stat_line(report, message):
                return
            report.in_stats = False
        if message.startswith("["):
            if report is not None and "mem_cgroup_out_of_memory" in message:
                meminfo_line(report, message)  # an old-style `[<addr>] fn+0x..` frame
                return
            self._task_line(record, message, done)
            return
        if report is not None:
            report.foreign_table = False
        if message.startswith("Tasks state ("):
            if self._report is not None and table_elsewhere(self._report):
                return
            report = self._continue(record, TASKS, done)
            report.header_evidence = True
            return
        if report is not None and not report.incident.victims and report.stage <= MEMINFO:
            meminfo_line(report, message)

    def _note(self, record: LogRecord, message: str, done: list[Incident]) -> bool:
        """A line that only adds a note (`report.note_line`); an OOM panic opens a report of its own
        when the rest of its report was cut off (the node went down: say so)."""
        report = self._report
        if report is None and message.startswith(L.OOM_END_LINES[1:]):
            report = self._start(record, HEADER, done)
            report.header_evidence = True
        return report is not None and note_line(report, message)

    def _kill_before(self, header: LogRecord) -> bool:
        """The open report is a lone kill line pasted just before `header`, which the kernel
        printed before it (fragments out of order): the kernel time proves the order, and a
        live stream, always in order, never holds one."""
        report = self._report
        if self.complete_log or report is None or report.header_evidence:
            return False
        kill = report.kill_record
        if kill is None or kill is not report.first or len(report.incident.victims) != 1:
            return False
        if kill.line_no is None or header.line_no is None:
            return False
        if not 0 < header.line_no - kill.line_no <= EARLY_KILL_LINES:
            return False
        if kill.kernel_time_s is None or header.kernel_time_s is None:
            return False
        return 0 < kill.kernel_time_s - header.kernel_time_s <= EARLY_KILL_S

    def _usage(
        self, record: LogRecord, usage: tuple[str, int, int, int], done: list[Incident]
    ) -> None:
        which, usage_kb, limit_kb, failcnt = usage
        report = self._report
        if which == "memory":
            memcg = report.incident.memcg if report is not None else None
            if memcg is not None and memcg.usage_bytes is not None:
                report = self._start(record, MEMINFO, done)
            else:
                report = self._continue(record, MEMINFO, done)
            report.incident.memcg = MemcgUsage(L.kib(usage_kb), L.limit_kib(limit_kb), failcnt)
            report.header_evidence = True
            return
        if report is not None and report.stage <= MEMINFO and not report.incident.victims:
            add_usage(report, which, usage_kb, limit_kb)

    def _stats_header(self, record: LogRecord, message: str, done: list[Incident]) -> None:
        parsed = L.parse_stats_header(message)
        if parsed is None:
            return
        path, inline = parsed
        add_stats(self._continue(record, MEMINFO, done), path, inline)

    def _task_line(self, record: LogRecord, message: str, done: list[Incident]) -> None:
        columns = parse_header(message)
        if self._report is not None and self._report.foreign_table:
            return  # a row of another report's table
        if columns is not None:
            if self._report is not None and table_elsewhere(self._report):
                return
            opened = self._continue(record, TASKS, done)
            opened.header_evidence = True
            opened.columns = columns
            return
        current = self._report
        if current is not None and current.columns is not None and not current.incident.victims:
            # A row that does not fit the header (a header of another kernel pasted above
            # it) is read by its own width rather than dropped.
            row = parse_row(message, current.columns)
            if row is None and (layout := infer_layout(message)) is not None:
                row = parse_row(message, layout)
            if row is not None:
                current.incident.tasks.append(row)
            return
        layout = infer_layout(message)
        row = parse_row(message, layout) if layout is not None else None
        if row is None:
            return
        if current is not None and not current.incident.victims and current.stage <= TASKS:
            current.stage = TASKS
            current.columns = layout
            current.incident.tasks.append(row)
            current.incident.notes.append(
                "task rows without their header: columns inferred from the row width"
            )
            return
        self._orphans.add(row, record.line_no)
        self._orphan_added = True


def _stat_line(report: ReportState, message: str) -> bool:
    """One `key value` line of a stats dump, kept; False for any other line."""
    stat = L.parse_stat_line(message)
    if stat is None:
        return False
    report.line_stats[stat[0]] = stat[1]
    return True


# A /dev/kmsg record of a kernel-written `key value` stats line and nothing else on its
# line (`_STAT_LINE` in oomwatch.decode.lines, the header as `parse_kmsg_record` takes it).
_RAW_STAT = lazy_compile(
    rb"[0-7],(\d{1,20}),(\d{1,20}),[-c+][^;\n]{0,200};(([a-z][a-z0-9_]{0,200}) (\d{1,20}))(?=\n|\Z)"
)
