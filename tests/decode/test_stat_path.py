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

from oomwatch.decode import LogRecord, ReportAssembler, parse_kmsg_record, parse_lines
from oomwatch.sources.kmsg import read_backlog

from .test_properties import CORPUS, CORPUS_LINES, SETTINGS, mutated_corpus

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
