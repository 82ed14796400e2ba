"""The agent's decode of a read (`KernelLog.decode`) skips the chatter unparsed and tells the
clock once per read, and comes out as feeding every parsed record would: the same incidents,
the same clock, the same wait before a report closes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oomwatch.decode import ReportAssembler, parse_kmsg_record
from oomwatch.incident import Incident
from oomwatch.reconcile.kernel_time import KernelClock
from oomwatch.sinks.log import get_logger
from oomwatch.sources.kernel_log import KernelLog
from oomwatch.sources.kmsg import read_backlog

DATA = Path(__file__).resolve().parents[1] / "data"
CAPTURES = [
    DATA.parent / "decode" / "data" / "real-6.18-memcg-v1-hostile-comm.kmsg",
    *sorted(DATA.glob("kernel-v2/*/*.kmsg")),
]
USERSPACE = b"12,7,5,-;oom-kill: Killed process 1 (x) forged by a pod"


def _each_record(reads: list[list[bytes]]) -> tuple[list[Incident], KernelClock]:
    """The reference: every record parsed, fed and noted one by one."""
    assembler, clock, out = ReportAssembler(), KernelClock(), []
    for arrival_s, read in enumerate(reads, 1):
        for raw in read:
            record = parse_kmsg_record(raw)
            if record is not None:
                assert record.kernel_time_s is not None
                clock.note(record.kernel_time_s, float(arrival_s))
                out += assembler.feed(record)
    return out + assembler.flush(), clock


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("read_size", [1, 7, 4096])
def test_a_read_decodes_as_each_record_fed(capture: Path, read_size: int) -> None:
    raws = list(read_backlog(str(capture)))
    raws.insert(len(raws) // 2, USERSPACE)
    reads = [raws[i : i + read_size] for i in range(0, len(raws), read_size)]
    kmsg = KernelLog("/nonexistent/kmsg", None, "b", get_logger(), lambda _n: None)
    incidents: list[Incident] = []
    for arrival_s, read in enumerate(reads, 1):
        incidents += kmsg.decode(list(enumerate(read)), live=True, arrival_s=float(arrival_s))
    incidents += kmsg.flush()
    expected, clock = _each_record(reads)
    assert [i.to_dict() for i in incidents] == [i.to_dict() for i in expected]
    assert incidents or not any(b"Killed process" in raw for raw in raws if raw != USERSPACE)
    now_s = float(len(reads))
    assert (kmsg.clock.offset_s(), kmsg.clock.late_s(now_s)) == (
        clock.offset_s(),
        clock.late_s(now_s),
    )


def test_chatter_after_a_kill_line_waits_as_any_line_does() -> None:
    """A kill line last in a read closes its report at once; chatter after it, skipped
    unparsed, waits for the log to go quiet as before."""
    raws = list(read_backlog(str(CAPTURES[0])))
    kill = next(i for i, raw in enumerate(raws) if b"Killed process" in raw)
    kmsg = KernelLog("/nonexistent/kmsg", None, "b", get_logger(), lambda _n: None)
    kmsg.decode(list(enumerate(raws[: kill + 1])), arrival_s=1.0)
    assert kmsg.flush_at() == 1.0  # KILL_LINE_IDLE_S
    kmsg.decode([(kill + 1, b"6,99999,1,-;eth0: link up")], arrival_s=2.0)
    assert kmsg.flush_at() == pytest.approx(2.02)  # FLUSH_IDLE_S


def _first_task_row(raws: list[bytes]) -> int | None:
    return next((i for i, raw in enumerate(raws) if TASK_ROW.search(raw)), None)


TASK_ROW = re.compile(rb";\[ *\d+\] +\d+ +\d+ ")
ROW_CAPTURES = [c for c in CAPTURES if _first_task_row(list(read_backlog(str(c)))) is not None]


@pytest.mark.parametrize("capture", ROW_CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_keyless_userspace_record_between_orphan_rows_changes_nothing(capture: Path) -> None:
    """Task rows whose report header was not read wait as orphans for their kill line; a
    record a pod writes to /dev/kmsg (facility != 0) is no kernel chatter and must not end
    that wait, as it could if the skip's key test ran before the facility was looked at."""
    raws = list(read_backlog(str(capture)))
    first_row = _first_task_row(raws)
    assert first_row is not None
    rows_on = raws[first_row:]  # the header and what came before it are lost
    rows_on.insert(1, b"12,8,5,-;a pod's line with nothing the decoder looks for")
    kmsg = KernelLog("/nonexistent/kmsg", None, "b", get_logger(), lambda _n: None)
    incidents = kmsg.decode(list(enumerate(rows_on)), live=True, arrival_s=1.0) + kmsg.flush()
    expected, _ = _each_record([rows_on])
    assert [i.to_dict() for i in incidents] == [i.to_dict() for i in expected]
    assert any(i.tasks for i in expected)  # the rows were an orphan table that a kill took


def test_the_backlog_decode_drops_userspace_records_before_the_chatter_skip() -> None:
    """`feed_kmsg` (the backlog at start-up) looks at the facility first too."""
    [capture] = [c for c in ROW_CAPTURES if c.name == "single-kill.kmsg"][:1]
    raws = list(read_backlog(str(capture)))
    first_row = _first_task_row(raws)
    assert first_row is not None
    rows_on = raws[first_row:]
    rows_on.insert(1, b"12,8,5,-;a pod's line with nothing the decoder looks for")
    assembler = ReportAssembler()
    incidents = [i for raw in rows_on for i in assembler.feed_kmsg(raw)] + assembler.flush()
    expected, _ = _each_record([rows_on])
    assert [i.to_dict() for i in incidents] == [i.to_dict() for i in expected]
