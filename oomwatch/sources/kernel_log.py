"""The daemon's kernel log: /dev/kmsg followed from the saved cursor, decoded record by record.

A report is many records; it is complete at its kill line where no group kill can follow,
else once the log is quiet for a moment, so the loop asks `flush_at()` when to close it.
One record the decoder chokes on is logged by its sequence number and skipped: the other
records of the read (up to thousands) and the kills they complete are kept, because the
cursor has already moved past all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from oomwatch.decode import ReportAssembler, parse_kmsg_record
from oomwatch.decode.lines import parse_killed
from oomwatch.decode.records import kernel_written, kmsg_stamp_s
from oomwatch.incident import Incident
from oomwatch.reconcile.attribution import LATE_SLACK_S
from oomwatch.reconcile.kernel_time import KernelClock, KernelTime
from oomwatch.sources.kmsg import MAX_RECORDS_PER_READ, KmsgCursor, KmsgFollower
from oomwatch.stages import EventLogger

FLUSH_IDLE_S = 0.02  # a report is complete once the kernel log is quiet this long
# ... or at once after its `Killed process` line (or the oom_reaper line that came in the same
# read): the kernel prints the whole report in one call path (0.3 ms here) and only group-kill
# lines follow the kill line; the oom_reaper line comes later or never, and the decoder ignores
# it once the report is closed.
KILL_LINE_IDLE_S = 0.0
# ... except where the kill may go on to a memory.oom.group kill: the members' kill lines
# follow, each printed after the killing task wrote the previous lines to the console --
# 5-10 ms apart on the idle lab VM (tests/data/kernel-v2/*/group-kill.kmsg), a line on a
# 115200-baud serial console takes 15 ms.  Closed early, the report splits, and its primary
# victim's second kill line (mm/oom_kill.c kills it again as a member) made a second kill of
# the pod: a second Event (6.12 in CI).
GROUP_KILL_IDLE_S = 0.1
RECORD_EXCERPT_BYTES = 512


class GroupKills(Protocol):
    """Whether a kill, as decoded so far, may be followed by its memory.oom.group members'
    kill lines (`GROUP_KILL_IDLE_S`); the loop passes its `CgroupView`."""

    def may_kill_group(self, incident: Incident, /) -> bool: ...


@dataclass(frozen=True, slots=True)
class KernelRead:
    """One loop turn's kernel log: the incidents complete now, and its clock as of then."""

    incidents: tuple[Incident, ...]
    time: KernelTime


class KernelLog:
    """The follower (None when the log cannot be opened) and the report assembler."""

    def __init__(
        self,
        path: str | None,
        cursor: KmsgCursor | None,
        boot_id: str | None,
        log: EventLogger,
        on_lost: Callable[[int], None],
    ) -> None:
        self.log = log
        self.assembler = ReportAssembler()
        self.clock = KernelClock()
        self._caught_up = False  # the last read emptied the log: what comes next is live
        # the log held nothing unread at this time (CLOCK_MONOTONIC; None: not known yet)
        self.read_through_s: float | None = None
        # ... as of before the open report's first line: its kills are not passed on yet
        self._through_before_open_s: float | None = None
        # ... and the kernel's stamp of that first line (a relay may pass it long after)
        self._open_since_kernel_s: float | None = None
        self.undecodable = 0
        self._on_lost = on_lost
        self._last_record_mono = 0.0
        self._flush_idle_s = FLUSH_IDLE_S
        self.follower: KmsgFollower | None = None
        if path is None:  # records are given to `decode` (the start-up warm-up)
            return
        try:
            self.follower = KmsgFollower(path, cursor, boot_id or "")
        except Exception as exc:
            log.error(
                "kmsg_unavailable",
                path=path,
                error=str(exc),
                consequence="kills are recorded from cgroup counters only (kmsg_missing)",
            )
            return
        resumed = cursor is not None and self.follower.cursor is not None
        log.info(
            "kmsg_opened",
            path=path,
            resume_seq=cursor.seq if resumed and cursor else None,
            backlog=not resumed,
        )

    def fileno(self) -> int | None:
        return None if self.follower is None else self.follower.fileno()

    @property
    def cursor(self) -> KmsgCursor | None:
        return None if self.follower is None else self.follower.cursor

    @property
    def open(self) -> bool:
        """A report is being assembled (the cursor must not be saved past it)."""
        return self.assembler.open

    def flush_at(self) -> float | None:
        """When the open report is complete if nothing more comes (CLOCK_MONOTONIC)."""
        return self._last_record_mono + self._flush_idle_s if self.assembler.open else None

    def time(self, now_s: float) -> KernelTime:
        """The log's clock as of `now_s` (CLOCK_MONOTONIC), a value for the reconciliation.

        While a report is open the log counts as read only up to its first line: a 20,000-
        member group kill read over seconds under load must not let its counter rises expire
        as counter-only kills before its claims come.  Up to that line's own stamp, where it
        is earlier than the last empty read: a starved relay passes the rest of a group kill
        long after the kernel printed it, while the agent's reads found its socket empty."""
        through = self.read_through_s
        if self.assembler.open:
            through = self._through_before_open_s
            stamp_s, offset_s = self._open_since_kernel_s, self.clock.offset_s()
            if through is not None and stamp_s is not None and offset_s is not None:
                # a converted stamp is late by up to the promptest read's delay
                late_s = self.clock.late_s(now_s)
                through = min(through, stamp_s - offset_s - LATE_SLACK_S - late_s)
        return self.clock.time(now_s, through)

    def take(self, *, read: bool, groups: GroupKills | None = None) -> KernelRead:
        """One loop turn: what the log has now (`read`: it is readable, or counters moved, so
        a kill they show has printed its line), the reports complete by now, and the clock."""
        incidents = self.read(groups) if read else []
        now_s = time.monotonic()
        return KernelRead((*incidents, *self.flush_if_idle(now_s)), self.time(now_s))

    def read(self, groups: GroupKills | None = None) -> list[Incident]:
        """Decode what the log has now; count records the kernel overwrote before we read."""
        if self.follower is None:
            return []
        live = self._caught_up
        started_s = time.monotonic()
        if not self.assembler.open:
            self._through_before_open_s = self.read_through_s
        records = self.follower.read_available()
        self._caught_up = len(records) < MAX_RECORDS_PER_READ
        if self._caught_up:
            self.read_through_s = started_s
        out = self.decode(records, live=live, groups=groups)
        lost = self.follower.take_lost()
        if lost:
            self._on_lost(lost)
            self.log.warning(
                "kmsg_records_lost",
                records=lost,
                total=self.follower.stats.records_lost,
                overruns=self.follower.stats.overruns,
            )
        return out

    def decode(
        self,
        records: list[tuple[int, bytes]],
        *,
        live: bool = False,
        arrival_s: float | None = None,
        groups: GroupKills | None = None,
    ) -> list[Incident]:
        """Feed (seq, raw) records one by one; a failing one is logged and skipped.  Records
        read `live` (not replayed backlog) also tell the clock offset, as one read
        (`KernelClock.note_read`).  `arrival_s`: when they were read (CLOCK_MONOTONIC;
        None: now); `groups`: where a group kill may follow (None: nowhere)."""
        out: list[Incident] = []
        read_s = time.monotonic() if arrival_s is None else arrival_s
        last_message: str | None = None  # the last record fed decides how long to wait
        earliest_s: float | None = None  # the read's stamps, for the clock
        latest_s: float | None = None
        assembler = self.assembler
        for seq, raw in records:
            try:
                if not kernel_written(raw):
                    continue  # userspace-written (facility != 0): no state of ours moves
                if assembler.skips_kmsg(raw):  # chatter: only its stamp is read
                    stamp_s = kmsg_stamp_s(raw)
                    if stamp_s is None:
                        continue  # garbage: no stamp to tell the clock
                    message = ""  # holds no key: not a kill or reaper line (`_idle_after`)
                elif (stat := assembler.stat_kmsg(raw)) is not None:
                    stamp_s, message = stat  # a stats-dump line, taken from its bytes
                else:
                    record = parse_kmsg_record(raw)
                    if record is None:
                        continue
                    stamp_s = record.kernel_time_s
                    opened = assembler.open_incident
                    out += assembler.feed(record)
                    if assembler.open_incident is not opened:
                        self._open_since_kernel_s = stamp_s
                    message = record.message
                if stamp_s is not None:
                    if earliest_s is None or stamp_s < earliest_s:
                        earliest_s = stamp_s
                    if latest_s is None or stamp_s > latest_s:
                        latest_s = stamp_s
                last_message = message
            except Exception as exc:
                self.undecodable += 1
                self.log.error(
                    "kmsg_record_undecodable",
                    seq=seq,
                    record=raw[:RECORD_EXCERPT_BYTES].decode("utf-8", "replace"),
                    error=f"{type(exc).__name__}: {exc}",
                    consequence="record skipped; the rest of the read is kept",
                )
        if live and earliest_s is not None and latest_s is not None:
            self.clock.note_read(earliest_s, latest_s, read_s)
        if last_message is not None:
            self._flush_idle_s = self._idle_after(last_message, groups)
        if records:  # quiet is counted from the end of decoding (a long read takes a while)
            self._last_record_mono = time.monotonic() if arrival_s is None else arrival_s
        return out

    def _idle_after(self, message: str, groups: GroupKills | None) -> float:
        """How long the log must be quiet after this record for the open report to be done."""
        incident = self.assembler.open_incident
        if parse_killed(message) is None and not (
            message.startswith("oom_reaper: ") and incident is not None and incident.victims
        ):
            return FLUSH_IDLE_S
        if incident is None:
            return KILL_LINE_IDLE_S
        if incident.group_kill or (groups is not None and groups.may_kill_group(incident)):
            return GROUP_KILL_IDLE_S
        return KILL_LINE_IDLE_S

    def note_quiet(self, polled_at_s: float) -> None:
        """The loop's poll found nothing to read at `polled_at_s`: read through then."""
        if self._caught_up:
            self.read_through_s = polled_at_s

    def flush_if_idle(self, now_mono: float) -> list[Incident]:
        flush_at = self.flush_at()
        return self.assembler.flush() if flush_at is not None and now_mono >= flush_at else []

    def flush(self) -> list[Incident]:
        return self.assembler.flush()

    def close(self) -> None:
        if self.follower is not None:
            self.follower.close()
