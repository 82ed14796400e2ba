"""Assemble kernel records into OOM incidents, one record at a time (streaming and batch).

The kernel prints a report in a fixed order (header, stack, memcg or global memory info,
task table, `oom-kill:` summary, kill lines, group kill, reaper).  A line of an earlier stage
than the open report has reached, or a second kill without a group-kill line, starts a new
incident; anything else is attached.  Lines of other kernel chatter are ignored, so the same
incidents come out whether the chatter is fed or skipped (`decode_text` skips it).
"""

from __future__ import annotations

import re

from oomwatch.decode import forwarded
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
from oomwatch.decode.records import LogRecord, parse_kmsg_record
from oomwatch.decode.report import (
    GROUP,
    HEADER,
    KILLED,
    MEMINFO,
    SELECT,
    SUMMARY,
    TASK_IN,
    TASKS,
    ReportState,
    add_reaped,
    add_stats,
    add_summary,
    add_usage,
    finish,
    meminfo_line,
    note_line,
    table_elsewhere,
)
from oomwatch.decode.stamps import YearClock
from oomwatch.decode.tasks import infer_layout, parse_header, parse_row
from oomwatch.incident import Incident, MemcgUsage, Victim
from oomwatch.sanitize import escape_control
from oomwatch.store.limits import MAX_VICTIMS, largest_victims

# A gap in kernel time this long ends a report: no report's lines are that far apart.
REPORT_GAP_S = 10.0
# Lines that open, place or close a report: a gap in kernel time before one of them ends
# the open report; any other line that far away is another report's, pasted in (ignored).
_REPORT_LINES = (
    " invoked oom-killer",
    "Killed process ",
    "ill process ",
    "oom-kill:",
    "memory.oom.group",
    "Task in ",
    "Memory limit reached",
    "memory: usage",
    "Memory cgroup stats for ",
    "callbacks suppressed",
)


# Every line kind that opens a report or comes after its memory info (task table, summary,
# kill, group and reaper lines) holds one of these; before the task table a report also
# needs the stack's pid line and the global meminfo lines.
_KEYS = ("oom", " process ", "emory", "Task")
_PRE_TABLE_KEYS = (
    *_KEYS,
    "swap: ",
    "kmem: ",
    "PID: ",
    "Pid: ",
    "Mem-Info",
    "Node ",
    "_anon:",
    "_file:",
    "kB ",
    " per-cpu:",
)
# Every substring by which any line may matter to the assembler at some stage: a line of
# none of these (and not starting with `[`) is ignored whenever `ignores_keyless()`.
LINE_KEYS = _PRE_TABLE_KEYS
_KEY_RE = re.compile("|".join(map(re.escape, _KEYS)))
_KILLED_PID = re.compile(r"Killed process \d")
_PRE_TABLE_KEY_RE = re.compile("|".join(map(re.escape, _PRE_TABLE_KEYS)))
# The same in a raw /dev/kmsg record (a task row starts right after the `;`).
_RAW_KEY_RE = re.compile("|".join(map(re.escape, (*_KEYS, ";["))).encode())
_RAW_PRE_TABLE_KEY_RE = re.compile("|".join(map(re.escape, (*_PRE_TABLE_KEYS, ";["))).encode())


def _has_key(message: str, keys: re.Pattern[str]) -> bool:
    """Cheap test: could this line matter? (most chatter fails it)."""
    return message.startswith("[") or keys.search(message) is not None


class ReportAssembler:
    """Feed `LogRecord`s in log order; get each incident once it is complete.

    `feed` returns the incidents a record completed (a new report began); `flush` closes
    the open one (end of input, or the daemon saw ~20 ms without records).
    """

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

    def ignores_keyless(self) -> bool:
        """True when a record whose message holds none of `LINE_KEYS` (and does not start
        with `[`) cannot change anything until a record that does: the scanner then skips
        runs of such lines (only the first may clear orphan rows, and it is fed)."""
        return self._keys() is not None

    def feed(self, record: LogRecord) -> list[Incident]:
        """Add one record; return the incidents it completed."""
        done: list[Incident] = []
        report = self._report
        if report is not None and record.source_format == "journal" and not report.incident.victims:
            report.journal = True  # a continuation line: only journalctl writes those
        for message in L.message_lines(record.message):
            self._orphan_added = False
            keys = self._keys()
            if keys is None or _has_key(message, keys):
                self._line(record, message, done)
            if (
                self._orphans.rows
                and not self._orphan_added
                and not self._orphans.bridged_by(record, _KEY_RE.search(message) is not None)
            ):
                self._orphans.clear()
        return done

    def feed_kmsg(self, raw: bytes) -> list[Incident]:
        """`feed(parse_kmsg_record(raw))`, skipping the parse for records that cannot matter.

        The daemon's path for /dev/kmsg: most records are chatter, and a substring test on
        the bytes is far cheaper than building a record.
        """
        keys = self._keys()
        if keys is not None:
            raw_keys = _RAW_KEY_RE if keys is _KEY_RE else _RAW_PRE_TABLE_KEY_RE
            if raw_keys.search(raw) is None:
                if self._orphans.rows:
                    self._orphans.clear()
                return []
        record = parse_kmsg_record(raw)
        return self.feed(record) if record is not None else []

    def flush(self) -> list[Incident]:
        """Close the open report, if any."""
        done: list[Incident] = []
        self._close(done)
        return done

    # --- internals -------------------------------------------------------------------

    def _keys(self) -> re.Pattern[str] | None:
        """The substrings one of which a line needs to matter now; None: every line may."""
        report = self._report
        if report is None or report.incident.victims or report.stage >= TASKS:
            return _KEY_RE
        return None if report.in_stats else _PRE_TABLE_KEY_RE

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
        report.seen.add(_dedupe_key(record, record.message))
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

    def _line(self, record: LogRecord, message: str, done: list[Incident]) -> None:
        report = self._report
        if report is not None:
            key = _dedupe_key(record, message)
            if key in report.seen and not (report.stage > TASKS and parse_header(message)):
                return  # a repeated line (terminal paste): count it once
            report.seen.add(key)
            if self._far(report, record, message):
                if not any(k in message for k in _REPORT_LINES):
                    return  # another report's line pasted into this one
                self._close(done)
                report = None
        if self._report_line(record, message, done):
            self._sequence.saw(record)
        else:
            self._detail_line(record, message, done)
        report = self._report
        if report is not None and report.stamped is None and record.source_format != "plain":
            report.stamped = record

    def _far(self, report: ReportState, record: LogRecord, message: str) -> bool:
        """Whether the line's kernel time is too far from the report's (else it moves on)."""
        now = record.kernel_time_s
        if now is None or report.last_time_s is None:
            if now is not None:
                report.last_time_s = now
            return False
        if now - report.last_time_s > REPORT_GAP_S or now < report.last_time_s - 1.0:
            return True
        report.last_time_s = now
        return False

    def _report_line(self, record: LogRecord, message: str, done: list[Incident]) -> bool:
        """Lines that open, place or close a report; True if the line was one."""
        report = self._report
        # Kill lines first: their strict end-anchored pattern cannot be forged by a name,
        # while the header begins with the (hostile) name of the invoking task.
        if "Killed process " in message:
            killed = forwarded.read_kill(message)
            if killed is not None:
                self._killed(record, killed[:2], done)
                if killed[2] is not None and self._report is not None:
                    self._report.incident.notes.append(killed[2])
                return True
        if "oom-killer: " in message and self._invoked(record, message, done):
            return True
        if message.startswith("oom-kill:"):
            self._summary(record, message, done)
            return True
        if report is not None and _KILLED_PID.search(message):
            self.warnings.append(
                f"line {record.line_no}: a 'Killed process' line not understood: "
                f"{escape_control(message[:200])}"
            )
            return True
        if "ill process " in message:
            selected = L.parse_kill_select(message)
            if selected is not None:
                self._select(record, selected, done)
                return True
        if "memory.oom.group" in message and self._group(record, message, done):
            return True
        if message.startswith("oom_reaper: "):
            self._reaped(record, message)
            return True
        if message.startswith("oom_kill_process: "):
            count = L.parse_suppressed(message)
            if count is not None:
                self._suppressed(record, count, done)
                return True
        return False

    def _invoked(self, record: LogRecord, message: str, done: list[Incident]) -> bool:
        """`<comm> invoked oom-killer: ...` opens a report."""
        invoked = L.parse_invoked(message)
        if invoked is None:
            return False
        report = self._start(record, HEADER, done)
        report.incident.invoker, note = invoked
        report.header_evidence = True
        if note:
            report.incident.notes.append(note)
        return True

    def _group(self, record: LogRecord, message: str, done: list[Incident]) -> bool:
        """`Tasks in <cgroup> are going to be killed due to memory.oom.group set`."""
        group = L.parse_group(message)
        if group is None:
            return False
        report = self._report
        if report is None or not report.incident.victims:
            report = self._start(record, GROUP, done)
        report.stage = GROUP
        report.incident.group_kill = True
        report.incident.group_cgroup = group
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
            stat = L.parse_stat_line(message)
            if stat is not None:
                report.line_stats[stat[0]] = stat[1]
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

    def _suppressed(self, record: LogRecord, count: int, done: list[Incident]) -> None:
        """`oom_kill_process: N callbacks suppressed` begins the next report; in a saved log
        it is the evidence that earlier kills' reports were withheld (`context`)."""
        if self._report is not None and self._report.incident.victims:
            self._close(done)
        if not self.complete_log:
            self._witness.withheld(count, record.message)

    def _summary(self, record: LogRecord, message: str, done: list[Incident]) -> None:
        summary = L.parse_oom_kill(message)
        if summary is None:
            return
        report = self._report
        if (
            report is None
            or report.summary is not None
            or report.stage > SUMMARY
            or (report.incident.victims)
        ):
            report = self._start(record, SUMMARY, done)
        add_summary(report, summary)
        report.summary_record = record

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

    def _killed(
        self, record: LogRecord, killed: tuple[str | None, Victim], done: list[Incident]
    ) -> None:
        kill_message, victim = killed
        report = self._report
        if report is not None and report.incident.victims and report.incident.group_kill:
            incident = report.incident
            if victim.pid not in report.victim_pids:
                report.victim_pids.add(victim.pid)
                incident.victims.append(victim)
                if len(incident.victims) >= 2 * MAX_VICTIMS:
                    kept = largest_victims(incident.victims, MAX_VICTIMS)
                    incident.victims_omitted += len(incident.victims) - len(kept)
                    incident.victims = kept
            report.incident.kills_counted = (report.incident.kills_counted or 0) + 1
            report.last_kill_time_s = record.kernel_time_s or report.last_kill_time_s
            return
        if report is None or report.incident.victims:
            follows = self._sequence.follows(record)
            group = self._group_tail.continues(record, follows, victim.pid)
            report = self._start(record, KILLED, done)
            report.seq_follows = follows
            if group is not None:
                continue_group(report, group)
        report.stage = KILLED
        report.incident.victims.append(victim)
        self._early_reaper.apply(report.incident, victim, record.line_no)
        report.victim_pids.add(victim.pid)
        report.incident.kills_counted = 1
        report.kill_record = record
        report.last_kill_time_s = record.kernel_time_s
        report.kill_message = kill_message or report.kill_message

    def _select(
        self, record: LogRecord, selected: tuple[str | None, int, str, int], done: list[Incident]
    ) -> None:
        kill_message, pid, comm, score = selected
        report = self._continue(record, SELECT, done)
        report.kill_message = kill_message
        report.incident.selected_pid = pid
        report.incident.notes.append(
            f"the kernel selected pid {pid} ({escape_control(comm)}) with score {score}; "
            "it may kill a child instead (pre-5.1 'or sacrifice child')"
        )

    def _reaped(self, record: LogRecord, message: str) -> None:
        reaped = L.parse_reaped(message)
        if reaped is not None and self._report is not None:
            add_reaped(self._report, *reaped)
        elif reaped is not None:
            self._early_reaper.hold(*reaped, record.line_no)  # pasted before its report

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
        layout = infer_layout(message)
        if current is not None and current.columns is not None and not current.incident.victims:
            # A row that does not fit the header (a header of another kernel pasted above
            # it) is read by its own width rather than dropped.
            row = parse_row(message, current.columns)
            if row is None and layout is not None:
                row = parse_row(message, layout)
            if row is not None:
                current.incident.tasks.append(row)
            return
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


def continue_group(report: ReportState, group: Incident) -> None:
    """`report` (its first kill line) holds the rest of `group`'s members (`GroupTail`)."""
    incident = report.incident
    incident.group_kill = True
    incident.constraint = group.constraint
    incident.oom_memcg, incident.task_memcg = group.oom_memcg, group.task_memcg
    incident.group_cgroup = group.group_cgroup
    report.header_evidence = True  # the header was printed, with the first members
    report.seq_follows = None
    report.stage = GROUP
    incident.notes.append(
        f"the rest of the memory.oom.group kill at kernel time {group.kernel_time_s} s: its"
        " report was closed when the log paused, these members' records follow its last one"
        " with no record between"
    )


def _dedupe_key(record: LogRecord, message: str) -> tuple[object, ...]:
    return (record.kernel_time_s, record.wall_time, record.kmsg_seq, record.time_text, message)
