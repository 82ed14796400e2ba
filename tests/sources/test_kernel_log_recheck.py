"""When the loop reads the kernel log although poll() did not wake it: the kernel wakes
/dev/kmsg readers only at its next timer tick, so after OOM news (which comes before the kill
line is printed) or a read that left a report waiting for its kill line, the log is read
again every `RECHECK_INTERVAL_S` for `RECHECK_WINDOW_S`, and no longer once the report is out."""

from __future__ import annotations

import pytest
from support.kmsg import group_kill

from oomwatch.sinks.log import get_logger
from oomwatch.sources.kernel_log import (
    RECHECK_INTERVAL_S,
    RECHECK_WINDOW_S,
    KernelLog,
    recheck_at,
)

NEWS_S = 100.0


def loop_reads(until_s: float | None, news_s: float, late_s: float = 0.0) -> list[float]:
    """The times a loop reads the log when it sleeps until `recheck_at` each turn (and wakes
    `late_s` after it): the first read is the one the news itself causes."""
    reads = [news_s]
    while (at := recheck_at(until_s, reads[-1], reads[-1] + late_s)) is not None:
        reads.append(at)
    return reads


def test_news_at_t_is_followed_by_a_read_every_interval_until_the_window_ends() -> None:
    reads = loop_reads(NEWS_S + RECHECK_WINDOW_S, NEWS_S)
    steps = round(RECHECK_WINDOW_S / RECHECK_INTERVAL_S)
    assert reads == [pytest.approx(NEWS_S + k * RECHECK_INTERVAL_S) for k in range(steps + 1)]


def test_a_loop_that_woke_late_reads_at_once_and_never_after_the_window() -> None:
    late_s = 3 * RECHECK_INTERVAL_S  # e.g. starved of CPU
    reads = loop_reads(NEWS_S + RECHECK_WINDOW_S, NEWS_S, late_s)
    assert reads[1] == pytest.approx(NEWS_S + late_s)  # due already: no further sleep
    assert reads[-1] <= NEWS_S + RECHECK_WINDOW_S
    assert recheck_at(NEWS_S + RECHECK_WINDOW_S, NEWS_S, NEWS_S + RECHECK_WINDOW_S) is None


def test_without_news_the_loop_waits_for_the_kernel() -> None:
    assert recheck_at(None, NEWS_S, NEWS_S + 1.0) is None


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


def test_oom_news_reads_now_and_asks_to_read_again_until_the_report_is_out() -> None:
    kmsg, records = kernel_log()
    assert kmsg.read_at(NEWS_S) is None and not kmsg.busy

    nothing_yet = kmsg.take(read=True, oom_news=True)  # the kill line is not printed yet
    assert nothing_yet.incidents == () and records.reads == 1
    assert kmsg.busy
    read_at = kmsg.read_at(0.0)
    assert read_at is not None and read_at > 0.0

    records.pending = [HEADER, KILL_LINE]
    [incident] = kmsg.take(read=True).incidents
    assert incident.victim is not None
    assert kmsg.read_at(0.0) is None and not kmsg.busy  # out: poll() waits for the kernel


def test_a_report_read_up_to_before_its_kill_line_asks_to_read_again() -> None:
    kmsg, records = kernel_log()
    records.pending = [HEADER]
    assert kmsg.take(read=True).incidents == ()
    assert kmsg.open and kmsg.busy and kmsg.read_at(0.0) is not None

    records.pending = [KILL_LINE]
    assert len(kmsg.take(read=True).incidents) == 1
    assert kmsg.read_at(0.0) is None and not kmsg.busy


def test_news_without_an_oom_reads_once_and_asks_nothing_more() -> None:
    kmsg, records = kernel_log()
    kmsg.take(read=True)  # e.g. a counter pass asked for, or pids seen
    assert records.reads == 1 and kmsg.read_at(0.0) is None and not kmsg.busy
