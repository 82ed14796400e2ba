"""The log counts as read only up to an open report's first line: a memory.oom.group kill
of 20,000 members, read over seconds on a loaded node, has its kills passed on only when
the report closes, and its counter rises must not expire as counter-only kills meanwhile
(the hostile soak logged 14,371 of them for one group kill)."""

from __future__ import annotations

from pathlib import Path

from support.kmsg import group_kill

from oomwatch.sinks.log import get_logger
from oomwatch.sources.kernel_log import KernelLog


class QueuedLog:
    """A follower that hands out the queued records, one batch a read."""

    def __init__(self, batches: list[list[bytes]]) -> None:
        self.batches = batches

    def read_available(self) -> list[tuple[int, bytes]]:
        batch = self.batches.pop(0) if self.batches else []
        return [(int(raw.split(b",", 2)[1]), raw) for raw in batch]

    def take_lost(self) -> int:
        return 0


def test_an_open_report_holds_the_read_through_time_at_its_start(tmp_path: Path) -> None:
    records = group_kill(200)
    kmsg = KernelLog(str(tmp_path / "absent"), None, "b", get_logger(), on_lost=lambda _n: None)
    kmsg.follower = QueuedLog([[], records[:100], records[100:]])  # type: ignore[assignment]
    kmsg.read()  # the log is empty: read through now
    before = kmsg.time(0.0).read_through_s
    assert before is not None
    kmsg.read()  # the report's first half: it stays open
    assert kmsg.assembler.open and kmsg.read_through_s is not None
    assert kmsg.read_through_s > before and kmsg.time(0.0).read_through_s == before
    kmsg.read()  # the rest: still open until the log is quiet
    assert kmsg.time(0.0).read_through_s == before
    (group,) = kmsg.flush()
    assert group.kills_counted == 201
    assert kmsg.time(0.0).read_through_s == kmsg.read_through_s  # closed: read through
