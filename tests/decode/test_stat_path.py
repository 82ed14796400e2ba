"""The assembler's lean path for a report's stats-dump lines (`ReportBody.stat_record`) gives
the incidents the general path gives: every real capture, every corpus log, and mutated
reports (lines repeated, swapped, cut, pasted from far away in kernel time)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.decode_corpus import CORPUS, CORPUS_LINES, SETTINGS, mutated_corpus

from oomwatch.decode import LogRecord, ReportAssembler, parse_kmsg_record, parse_lines
from oomwatch.sinks.log import get_logger
from oomwatch.sources.kernel_log import KernelLog
from oomwatch.sources.kmsg import read_backlog

DATA = Path(__file__).resolve().parents[1] / "data"
CAPTURES = [
    *sorted((Path(__file__).resolve().parent / "data").glob("*.kmsg")),
    *sorted(DATA.glob("kernel-v2/*/*.kmsg")),
]
TEXT_LOGS = [
    *CORPUS,
    *(p for p in sorted(DATA.glob("journal*/*")) if p.suffix != ".py"),
    *sorted(DATA.glob("dmesg-modes/*")),
]


class GeneralPath(ReportAssembler):
    """The reference: every stats line through the general path."""

    def stat_line(self, record: LogRecord, message: str) -> bool:
        return False


class Counted(ReportAssembler):
    """Counts the lines the lean path takes."""

    taken = 0

    def stat_line(self, record: LogRecord, message: str) -> bool:
        took = super().stat_line(record, message)
        self.taken += took
        return took


def _dicts(assembler: ReportAssembler, records: Iterable[LogRecord]) -> list[dict[str, object]]:
    out = []
    for record in records:
        out += assembler.feed(record)
    return [i.to_dict() for i in out + assembler.flush()]


def _same(records: list[LogRecord]) -> list[dict[str, object]]:
    lean = _dicts(ReportAssembler(), records)
    assert lean == _dicts(GeneralPath(), records)
    return lean


def _stats_taken(records: list[LogRecord]) -> int:
    assembler = Counted()
    _dicts(assembler, records)
    return assembler.taken


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_captures_decode_the_same(capture: Path) -> None:
    records = [r for r in map(parse_kmsg_record, read_backlog(str(capture))) if r is not None]
    incidents = _same(records)
    if any(i["memcg_stats"] for i in incidents):  # the lean path is the one they took
        assert _stats_taken(records) >= 20


@pytest.mark.parametrize("log", TEXT_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_text_logs_decode_the_same(log: Path) -> None:
    text = log.read_text(encoding="utf-8", errors="replace")
    _same(list(parse_lines(text.split("\n"))))


@SETTINGS
@given(mutated_corpus())
def test_mutated_reports_decode_the_same(lines: list[str]) -> None:
    _same(list(parse_lines(lines)))


@SETTINGS
@given(
    st.sampled_from(CORPUS_LINES),
    st.lists(st.tuples(st.integers(0, 400), st.sampled_from([-20.0, -2.0, 0.5, 30.0])), max_size=6),
)
def test_stat_lines_far_in_time_or_repeated_decode_the_same(
    lines: list[str], moves: list[tuple[int, float]]
) -> None:
    records = list(parse_lines(lines))
    for index, shift_s in moves:
        if records:
            record = records[index % len(records)]
            time_s = None if record.kernel_time_s is None else record.kernel_time_s + shift_s
            records.insert(index % len(records), replace(record, kernel_time_s=time_s))
    _same(records)


# Records that look like a stats line in a /dev/kmsg read: the bytes path must take each as
# `parse_kmsg_record` + `feed` would (or leave it to them).
HOSTILE_STAT_RECORDS = [
    b"6,%d,%d,-;rss 4096",
    b"6,%d,%d,-;rss 4096\n SUBSYSTEM=memory",
    b"6,%d,%d,c;cache 12",
    b"6,%d,%d,-;rss 4096 ",
    b"6,%d,%d,-;rss 4096\r",
    b"6,%d,%d,-;rss 40\\x3096",
    b"6,%d,%d,-;rss\\x204096",
    b"6,%d,%d,-;oom_kill 3",
    b"6,%d,%d,-;memory_x 3",
    b"14,%d,%d,-;rss 1",
    b"6,%d,%d,-;" + b"k" * 300 + b" 1",
    b"6,%d,%d,-;shmem 1",  # then a repeat of the same seq and stamp: counted once
]
# Lines that end the stats dump (not a `key value` line), after the ones above.
DUMP_ENDS = [
    b"6,%d,%d,-;rss 99999999999999999999999",
    b"6,%d,%d,-;rss 4096\xff",
    b"6,%d,%d,-;Rss 1",
]


def _with_hostile_stats(capture: Path) -> list[bytes]:
    raws = list(read_backlog(str(capture)))
    at = next(i for i, raw in enumerate(raws) if b";Memory cgroup stats for " in raw) + 2
    seq, usec = raws[at].split(b",")[1:3]
    forged = [raw % (int(seq), int(usec)) for raw in HOSTILE_STAT_RECORDS]
    far = b"6,%d,%d,-;swap 7" % (int(seq), int(usec) + 30_000_000)  # pasted from far away
    ends = [raw % (int(seq), int(usec)) for raw in DUMP_ENDS]
    return raws[:at] + forged + [forged[-1], far, *ends] + raws[at:]


@pytest.mark.parametrize("read_size", [1, 4096])
def test_hostile_stat_records_read_from_bytes_as_parsed(read_size: int) -> None:
    raws = _with_hostile_stats(CAPTURES[0])
    kmsg = KernelLog("/nonexistent/kmsg", None, "b", get_logger(), lambda _n: None)
    incidents = []
    for start in range(0, len(raws), read_size):
        read = list(enumerate(raws[start : start + read_size]))
        incidents += kmsg.decode(read, live=True, arrival_s=1.0)
    incidents += kmsg.flush()
    records = [r for r in map(parse_kmsg_record, raws) if r is not None]
    assert [i.to_dict() for i in incidents] == _dicts(GeneralPath(), records)
    assert [i.to_dict() for i in incidents] == _dicts_kmsg(raws)
    stats = incidents[0].memcg_stats or {}
    assert (stats["cache"], stats["rss"], stats["shmem"], stats.get("swap")) == (12, 40096, 1, None)


def _dicts_kmsg(raws: list[bytes]) -> list[dict[str, object]]:
    assembler, out = ReportAssembler(), []
    for raw in raws:
        out += assembler.feed_kmsg(raw)
    return [i.to_dict() for i in out + assembler.flush()]
