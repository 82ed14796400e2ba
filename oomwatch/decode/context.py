"""Lines that speak for reports other than their own: task rows printed before the report
line they belong to (a grep-filtered fragment), the kernel's `callbacks suppressed`
line, which says after the fact that earlier reports were withheld, and the /dev/kmsg
sequence numbers of a saved dump, which prove it where a kill line follows the previous
report's last line with no record between, and an `oom_reaper` line pasted before the report
it belongs to.
"""

from __future__ import annotations

from collections import deque

from oomwatch.decode.records import LogRecord
from oomwatch.decode.report import ReportState
from oomwatch.incident import Incident, TaskRow, Victim
from oomwatch.sanitize import escape_control

# Task rows seen without their header and outside a report (a grep-filtered fragment) are
# held, at most this many, for a report line that follows them within ORPHAN_GAP_LINES
# lines with nothing but blank lines and prose (a paste's commentary) between.
ORPHAN_ROWS_MAX = 4
ORPHAN_GAP_LINES = 6
# How far before its report line a held row may be: the text scan feeds this many lines
# before each window's first anchor (scan.py), so both decode paths see the same rows.
ORPHAN_LEAD_LINES = ORPHAN_GAP_LINES + ORPHAN_ROWS_MAX
# The kernel's oom_rs ratelimit in oom_kill_process(): DEFAULT_RATELIMIT_INTERVAL (5 s).
RATELIMIT_INTERVAL_S = 5.0
_RECENT_MAX = 64
# How far before its kill line an out-of-order `oom_reaper` line may be pasted (a report with
# its stack and a task table of a few hundred processes).
EARLY_REAPER_LINES = 600
# A kill line pasted before its report's header: the next few lines, and printed at most
# this long after the header by the kernel's clock (a report takes milliseconds; a slow
# console with a long task table, up to about a second).
EARLY_KILL_LINES = 5
EARLY_KILL_S = 2.0


class OrphanRows:
    """Task rows outside any report, held for the report line right after them."""

    def __init__(self) -> None:
        # With their line numbers; a plain list, tested on the daemon's hot path.
        self.rows: list[tuple[TaskRow, int | None]] = []

    def add(self, row: TaskRow, line_no: int | None) -> None:
        self.rows = [*self.rows, (row, line_no)][-ORPHAN_ROWS_MAX:]

    def clear(self) -> None:
        self.rows.clear()

    def bridged_by(self, record: LogRecord, has_key: bool) -> bool:
        """Prose close after the rows (a paste's commentary) keeps them for their report."""
        return (
            record.source_format == "plain"
            and not has_key
            and _near(self.rows[-1][1], record.line_no)
        )

    def take(self, line_no: int | None) -> list[TaskRow]:
        """The held rows that belong to a report starting at `line_no` (and forget all)."""
        rows: list[TaskRow] = []
        if self.rows and _near(self.rows[-1][1], line_no):
            rows = [
                row
                for row, n in self.rows
                if n is None or line_no is None or line_no - n <= ORPHAN_LEAD_LINES
            ]
        self.rows.clear()
        return rows


def _near(orphan_line: int | None, line_no: int | None) -> bool:
    """A line close enough after an orphan row for the row to belong to its report.

    Without line numbers (/dev/kmsg records) only the very next record is; `feed` clears
    the rows on any other record in between.
    """
    if orphan_line is None or line_no is None:
        return orphan_line is None and line_no is None
    return 0 < line_no - orphan_line <= ORPHAN_GAP_LINES


class SuppressionWitness:
    """Recent incidents of a saved log, for a later `oom_kill_process: N callbacks
    suppressed` line: lib/ratelimit.c prints it when the next report is let through, so the
    last header-less kills (since the last report printed in full, within one interval of
    the last of them) were the ones withheld."""

    def __init__(self) -> None:
        self._recent: deque[tuple[Incident, bool]] = deque(maxlen=_RECENT_MAX)

    def note(self, incident: Incident, had_header: bool) -> None:
        self._recent.append((incident, had_header))

    def withheld(self, count: int, line: str) -> None:
        """Mark up to `count` of the kills before `line` as rate-limited (their header)."""
        latest: float | None = None
        for incident, had_header in reversed(self._recent):
            if had_header or count <= 0:
                break
            if not incident.victims:
                continue
            when = incident.kernel_time_s
            latest = when if latest is None else latest
            if when is not None and latest is not None and latest - when > RATELIMIT_INTERVAL_S:
                break
            if not incident.header_suppressed:
                incident.header_suppressed = True
                said = escape_control(line)
                incident.notes.append(f"the kernel withheld this report (a later line: {said!r})")
            count -= 1
        self._recent.clear()


class SequenceWitness:
    """The sequence number of the last report line of a saved /dev/kmsg dump (`cat
    /dev/kmsg`, a collector's records).  A kill line numbered right after it had no room for
    a header: the kernel printed none, its rate limit withheld it (`oom_kill_process()`
    prints the header, stack, memory and summary only within `oom_rs`), not a cut or a
    filter, which leave a gap."""

    def __init__(self) -> None:
        self._last: int | None = None

    def saw(self, record: LogRecord) -> None:
        """A report line (kill, select, summary, group, reaper) was fed."""
        if record.kmsg_seq is not None:
            self._last = record.kmsg_seq

    @property
    def last(self) -> int | None:
        """The last report line's sequence number (None before one, or in a text log)."""
        return self._last

    def follows(self, record: LogRecord) -> int | None:
        """The previous report line's sequence number if `record` comes right after it."""
        seq, last = record.kmsg_seq, self._last
        return last if seq is not None and last is not None and seq == last + 1 else None


class GroupTail:
    """The memory.oom.group kill whose report was closed last, for members the kernel was
    still printing.  The daemon closes a group kill once its input is quiet for 0.1 s; on a
    loaded node the relay or the agent may pause that long in the middle of 20,000 members,
    and each member after the pause was a kill of its own: thousands of incidents (a pod's
    whole share of the store, an Event each).  A kill line whose /dev/kmsg record comes right
    after the group's last one continues the group, except the kernel's repeat of the primary
    victim, which stays the header-less repeat the reconciler knows (and is stepped over)."""

    def __init__(self) -> None:
        # (the group's last record, the group's cgroups and time, its primary victim's pid)
        self._last: tuple[int, Incident, int | None] | None = None

    def closed(self, incident: Incident, last_seq: int | None) -> None:
        """A report was closed: remember it (its cgroups and time only) if a group kill."""
        last = self._last
        if last is not None and incident.kmsg_seq == last[0] and not incident.group_kill:
            return  # the primary's repeat, stepped over in `continues`
        if not incident.group_kill or last_seq is None:
            self._last = None
            return
        kept = Incident(
            kind=incident.kind,
            kernel_time_s=incident.kernel_time_s,
            constraint=incident.constraint,
            oom_memcg=incident.oom_memcg,
            task_memcg=incident.task_memcg,
            group_cgroup=incident.group_cgroup,
            continues_group_kill_s=incident.continues_group_kill_s,
        )
        self._last = (last_seq, kept, incident.victims[0].pid if incident.victims else None)

    def continues(self, record: LogRecord, follows: int | None, pid: int) -> Incident | None:
        """The closed group kill the kill line of `pid` in `record` continues (`follows`: the
        report line its record comes right after, `SequenceWitness.follows`), or None."""
        last = self._last
        if last is None or follows is None or follows != last[0] or record.kmsg_seq is None:
            self._last = None
            return None
        if pid == last[2]:
            self._last = (record.kmsg_seq, last[1], last[2])
            return None
        self._last = None
        return last[1]


class EarlyReaper:
    """An `oom_reaper: reaped process N (comm)` line with no report open: a paste whose
    fragments are out of order (the reaper's line first).  Held for the kill line of the
    same pid and name a little later in the same paste; a live /dev/kmsg stream (no line
    numbers) always prints the kill first, so nothing is held there."""

    def __init__(self) -> None:
        self._held: tuple[int, str, int, int] | None = None

    def hold(self, pid: int, comm: str, anon_kb: int, line_no: int | None) -> None:
        self._held = None if line_no is None else (pid, comm, anon_kb, line_no)

    def apply(self, incident: Incident, victim: Victim, line_no: int | None) -> None:
        """Give `victim` (just killed, at `line_no`) the held reaper line if it is its own."""
        held, self._held = self._held, None
        if held is None or line_no is None or (held[0], held[1]) != (victim.pid, victim.comm):
            return
        if 0 < line_no - held[3] <= EARLY_REAPER_LINES:
            victim.reaped_anon_rss_bytes = held[2] * 1024
            incident.notes.append(
                f"the oom_reaper line of pid {victim.pid} comes before its report in this"
                " paste (fragments out of order)"
            )


def adopt_early_kill(report: ReportState, early: ReportState) -> None:
    """Give `report` (a header that killed nothing) the kill line pasted just before it:
    its victim, kill message and notes; the report's own lines keep its time and stamp."""
    incident, held = report.incident, early.incident
    incident.victims = held.victims
    incident.kills_counted = held.kills_counted
    incident.selected_pid = incident.selected_pid or held.selected_pid
    report.victim_pids |= early.victim_pids
    report.kill_message = report.kill_message or early.kill_message
    victim = held.victims[0]
    incident.notes.extend(held.notes)
    incident.notes.append(
        f"the kill line of pid {victim.pid} ({escape_control(victim.comm)}) comes before its"
        " report in this paste (fragments out of order)"
    )
