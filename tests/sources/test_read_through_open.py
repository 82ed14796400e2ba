"""The log counts as read only up to an open report's first line: a memory.oom.group kill
of 20,000 members, read over seconds on a loaded node, has its kills passed on only when
the report closes, and its counter rises must not expire as counter-only kills meanwhile
(the hostile soak logged 14,371 of them for one group kill)."""

from __future__ import annotations

from pathlib import Path

from support.kmsg import group_kill
from support.prometheus import parsed_samples

from oomwatch.sinks.log import get_logger
from oomwatch.sinks.metrics import Metrics
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


def test_the_rest_of_a_group_kill_after_a_pause_continues_it_and_holds_the_log_at_its_stamp(
    tmp_path: Path,
) -> None:
    """A starved relay passes the rest of a group kill long after the kernel printed it (and
    after the agent's reads found the log empty): while that rest is open, the log counts as
    read only up to its first line's stamp, and the rest is the same kill, counted once."""
    records = group_kill(200)
    kmsg = KernelLog(str(tmp_path / "absent"), None, "b", get_logger(), on_lost=lambda _n: None)
    kmsg.clock.seed(0.0)  # the stamps are on CLOCK_MONOTONIC
    kmsg.follower = QueuedLog(  # type: ignore[assignment]
        [records[:100], [], records[100:150], records[150:]]
    )
    kmsg.read()
    (first,) = kmsg.flush()  # a pause closed the report
    kmsg.read()  # the log reads empty: read through now, past the rest's stamps
    assert kmsg.time(0.0).read_through_s == kmsg.read_through_s
    kmsg.read()  # the rest begins
    through = kmsg.time(0.0).read_through_s
    assert kmsg.assembler.open and through is not None and through < 0.0002  # its stamp
    kmsg.read()
    (rest,) = kmsg.flush()
    assert first.continues_group_kill_s is None
    assert rest.continues_group_kill_s == first.kernel_time_s == 0.000101
    assert (first.kills_counted or 0) + (rest.kills_counted or 0) == 201
    metrics = Metrics()
    for incident in (first, rest):
        metrics.emit(incident)
    scraped = parsed_samples(metrics.exposition())
    groups = [value for _, value in scraped["oomwatch_group_oom_kills_total"]]
    assert sum(groups) == 1
