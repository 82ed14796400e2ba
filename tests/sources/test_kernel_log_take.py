"""The loop's turn on the kernel log: it reads only when woken (the log is readable, or cgroup
news says a kill has printed its line), a report is out in the turn that reads its kill line,
and one read up to before its kill line waits for the kernel's wake-up, not for a timer."""

from __future__ import annotations

from support.kmsg import group_kill

from oomwatch.sinks.log import get_logger
from oomwatch.sources.kernel_log import FLUSH_IDLE_S, KernelLog


class PendingRecords:
    """A /dev/kmsg stand-in: what the kernel has stored, handed out on the next read."""

    def __init__(self) -> None:
        self.pending: list[bytes] = []
        self.reads = 0
        self.seq = 0

    def read_available(self) -> list[tuple[int, bytes]]:
        self.reads += 1
        out = [(self.seq + i, raw) for i, raw in enumerate(self.pending)]
        self.seq += len(out)
        self.pending = []
        return out

    def take_lost(self) -> int:
        return 0

    def fileno(self) -> int:
        return -1


def kernel_log() -> tuple[KernelLog, PendingRecords]:
    kmsg = KernelLog("/nonexistent/kmsg", None, "b", get_logger(), lambda _n: None)
    records = PendingRecords()
    kmsg.follower = records  # type: ignore[assignment]
    return kmsg, records


HEADER, KILL_LINE = group_kill(0)[:2]  # one report: its first line and its kill line


def test_a_turn_not_woken_by_the_log_or_news_reads_nothing() -> None:
    kmsg, records = kernel_log()
    records.pending = [HEADER, KILL_LINE]
    assert kmsg.take(read=False).incidents == () and records.reads == 0
    [incident] = kmsg.take(read=True).incidents
    assert incident.victim is not None and records.reads == 1


def test_a_report_is_out_in_the_turn_that_reads_its_kill_line() -> None:
    kmsg, records = kernel_log()
    records.pending = [HEADER]
    assert kmsg.take(read=True).incidents == ()
    flush_at = kmsg.flush_at()
    assert kmsg.open and flush_at is not None  # the loop sleeps until the kernel wakes it ...
    assert kmsg.take(read=False).incidents == () and records.reads == 1

    records.pending = [KILL_LINE]
    [incident] = kmsg.take(read=True).incidents
    assert incident.victim is not None
    assert not kmsg.open and kmsg.flush_at() is None


def test_a_report_cut_off_before_its_kill_line_is_closed_once_the_log_is_quiet() -> None:
    kmsg, records = kernel_log()
    records.pending = [HEADER]
    kmsg.take(read=True)
    flush_at = kmsg.flush_at()
    assert flush_at is not None
    assert kmsg.flush_if_idle(flush_at - FLUSH_IDLE_S / 2) == []
    [incident] = kmsg.flush_if_idle(flush_at)
    assert not kmsg.open and incident.kind == "memcg" and incident.oom_memcg is not None
