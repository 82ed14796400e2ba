"""Assemble kernel records into OOM incidents, one record at a time (streaming and batch).

The kernel prints a report in a fixed order (header, stack, memcg or global memory info,
task table, `oom-kill:` summary, kill lines, group kill, reaper).  A line of an earlier stage
than the open report has reached, or a second kill without a group-kill line, starts a new
incident; anything else is attached.  Lines of other kernel chatter are ignored, so the same
incidents come out whether the chatter is fed or skipped (`decode_text` skips it).

The lines that open, place or close a report are read here; the open report and the lines
inside it are `oomwatch.decode.body`'s, which lines may matter `oomwatch.decode.line_keys`'s.
"""

from __future__ import annotations

from oomwatch.decode import forwarded
from oomwatch.decode import lines as L
from oomwatch.decode.body import ReportBody
from oomwatch.decode.line_keys import (
    KEY_RE,
    KILLED_PID,
    RAW_KEY_RE,
    RAW_PRE_TABLE_KEY_RE,
    REPORT_GAP_S,
    REPORT_LINES,
    dedupe_key,
    has_key,
)
from oomwatch.decode.records import LogRecord, kernel_written, parse_kmsg_record
from oomwatch.decode.report import (
    GROUP,
    HEADER,
    KILLED,
    SELECT,
    SUMMARY,
    TASKS,
    ReportState,
    add_reaped,
    add_summary,
)
from oomwatch.decode.tasks import parse_header
from oomwatch.incident import Incident, Victim
from oomwatch.sanitize import escape_control
from oomwatch.store.limits import MAX_VICTIMS, largest_victims


class ReportAssembler(ReportBody):
    """Feed `LogRecord`s in log order; get each incident once it is complete.

    `feed` returns the incidents a record completed (a new report began); `flush` closes
    the open one (end of input, or the daemon saw ~20 ms without records).
    """

    def ignores_keyless(self) -> bool:
        """True when a record whose message holds none of `LINE_KEYS` (and does not start
        with `[`) cannot change anything until a record that does: the scanner then skips
        runs of such lines (only the first may clear orphan rows, and it is fed)."""
        return self._keys() is not None

    def ignores_keyless_run(self) -> bool:
        """`ignores_keyless()`, and no orphan rows wait that a keyless record would clear:
        then a whole run of such records changes nothing, its first included."""
        return self._keys() is not None and not self._orphans.rows

    def feed_keyless(self, record: LogRecord) -> list[Incident]:
        """`feed(record)` for a record of one line whose message holds none of `LINE_KEYS`
        nor `OOMKilling`, does not start with `[` and is not `plain` or `journal` (a dmesg
        chatter line, `decode.scan`): while keys are needed, and no group kill is open, all
        it can do is end the orphan rows' wait."""
        report = self._report
        if self._keys() is None or (report is not None and report.incident.group_kill):
            return self.feed(record)
        self._orphan_added = False
        if self._orphans.rows:
            self._orphans.clear()
        return []

    def feed(self, record: LogRecord) -> list[Incident]:
        """Add one record; return the incidents it completed."""
        done: list[Incident] = []
        report = self._report
        if report is not None and report.incident.group_kill and self._group_member(report, record):
            return done
        if report is not None and record.source_format == "journal" and not report.incident.victims:
            report.journal = True  # a continuation line: only journalctl writes those
        message = record.message
        messages = (
            (message,)
            if "\n" not in message and "OOMKilling" not in message
            else L.message_lines(message)
        )
        for message in messages:
            if self.stat_line(record, message):
                continue
            self._orphan_added = False
            keys = self._keys()
            if keys is None or has_key(message, keys):
                self._line(record, message, done)
            if (
                self._orphans.rows
                and not self._orphan_added
                and not self._orphans.bridged_by(record, KEY_RE.search(message) is not None)
            ):
                self._orphans.clear()
        return done

    def feed_kmsg(self, raw: bytes) -> list[Incident]:
        """`feed(parse_kmsg_record(raw))`, skipping the parse for records that cannot matter.

        The daemon's path for /dev/kmsg: most records are chatter, and a substring test on
        the bytes is far cheaper than building a record.
        """
        if not kernel_written(raw) or self.skips_kmsg(raw) or self.stat_kmsg(raw) is not None:
            return []
        record = parse_kmsg_record(raw)
        return self.feed(record) if record is not None else []

    def skips_kmsg(self, raw: bytes) -> bool:
        """True when the /dev/kmsg record cannot matter now, and feeding it is done: only
        the orphan rows it would clear are cleared (`feed_kmsg` then skips the parse)."""
        keys = self._keys()
        if keys is None:
            return False
        raw_keys = RAW_KEY_RE if keys is KEY_RE else RAW_PRE_TABLE_KEY_RE
        if raw_keys.search(raw) is not None:
            return False
        if self._orphans.rows:
            self._orphans.clear()
        return True

    def flush(self) -> list[Incident]:
        """Close the open report, if any."""
        done: list[Incident] = []
        self._close(done)
        return done

    # --- internals -------------------------------------------------------------------

    def _line(self, record: LogRecord, message: str, done: list[Incident]) -> None:
        report = self._report
        if report is not None:
            key = dedupe_key(record, message)
            if key in report.seen and not (report.stage > TASKS and parse_header(message)):
                return  # a repeated line (terminal paste): count it once
            report.seen.add(key)
            if self._far(report, record, message):
                if not any(k in message for k in REPORT_LINES):
                    return  # another report's line pasted into this one
                self._close(done)
                report = None
        # Every line `_report_line` takes holds `oom` or ` process ` (most lines do not).
        if ("oom" in message or " process " in message) and self._report_line(
            record, message, done
        ):
            self._sequence.saw(record)
        elif not self._stats_line(message):
            self._detail_line(record, message, done)
        report = self._report
        if report is not None and report.stamped is None and record.source_format != "plain":
            report.stamped = record

    def _group_member(self, report: ReportState, record: LogRecord) -> bool:
        """A member's kill line of the open group kill, taken as `_line` would take it but
        without trying it as every other kind of line first (20,000 members in one kill);
        False (nothing changed) for any record that needs the general path."""
        message = record.message
        if not report.incident.victims or self._orphans.rows or "\n" in message:
            return False
        if "OOMKilling" in message or record.source_format == "journal":
            return False
        now, last = record.kernel_time_s, report.last_time_s
        if now is None or last is None or now - last > REPORT_GAP_S or now < last - 1.0:
            return False  # `_far` decides
        fields = L.killed_now(message)
        if fields is None:
            return False
        self._orphan_added = False
        key = dedupe_key(record, message)
        if key in report.seen:
            return True  # a repeated line (a kill line is never a task table header)
        report.seen.add(key)
        report.last_time_s = now
        self._killed(record, (fields[0], L.victim_now(fields)), [])
        self._sequence.saw(record)
        if report.stamped is None and record.source_format != "plain":
            report.stamped = record
        return True

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
        if report is not None and KILLED_PID.search(message):
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


def continue_group(report: ReportState, group: Incident) -> None:
    """`report` (its first kill line) holds the rest of `group`'s members (`GroupTail`)."""
    incident = report.incident
    incident.group_kill = True
    first_s = group.continues_group_kill_s  # the kill's first piece's time
    incident.continues_group_kill_s = group.kernel_time_s if first_s is None else first_s
    incident.constraint = group.constraint
    incident.oom_memcg, incident.task_memcg = group.oom_memcg, group.task_memcg
    incident.group_cgroup = group.group_cgroup
    report.header_evidence = True  # the header was printed, with the first members
    report.seq_follows = None
    report.stage = GROUP
    incident.notes.append(
        f"the rest of the memory.oom.group kill at kernel time"
        f" {incident.continues_group_kill_s} s: its"
        " report was closed when the log paused, these members' records follow its last one"
        " with no record between"
    )
