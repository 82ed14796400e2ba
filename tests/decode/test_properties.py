"""Bad input never raises: random bytes, invalid UTF-8, mutated and truncated corpus reports."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from support.decode_corpus import CORPUS_LINES, SETTINGS, mutated_corpus
from support.hostile_lines import HUGE_NUMBER_HEADER, MEGABYTE_LINES, huge_number_lines

from oomwatch.decode import (
    LogRecord,
    ReportAssembler,
    decode_lines,
    decode_text,
    parse_kmsg_record,
)
from oomwatch.decode.records import MAX_MESSAGE_CHARS
from oomwatch.incident import INCIDENT_KINDS, Incident


def _sane(incidents: list[Incident]) -> None:
    for incident in incidents:
        assert incident.kind in INCIDENT_KINDS
        json.dumps(incident.to_dict())  # the --json contract always serialises
        assert len({v.pid for v in incident.victims}) == len(incident.victims)


@SETTINGS
@given(mutated_corpus())
def test_mutated_corpus_never_raises(lines: list[str]) -> None:
    text = "\n".join(lines)
    fast = decode_text(text)
    full = decode_lines(lines)
    _sane(fast.incidents)
    _sane(full.incidents)


@SETTINGS
@given(st.sampled_from(CORPUS_LINES), st.data())
def test_dropping_lines_keeps_fast_scan_equal_to_line_by_line(
    lines: list[str], data: st.DataObject
) -> None:
    """Grep-filtered fragments: the anchor scan still agrees with parsing every line."""
    keep = data.draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
    kept = [line for line, k in zip(lines, keep, strict=True) if k]
    fast = [i.to_dict() for i in decode_text("\n".join(kept)).incidents]
    full = [i.to_dict() for i in decode_lines(kept).incidents]
    assert fast == full


@SETTINGS
@given(st.binary(max_size=8192))
def test_random_bytes(data: bytes) -> None:
    _sane(decode_text(data).incidents)
    parse_kmsg_record(data)


@SETTINGS
@given(st.lists(st.binary(max_size=600), max_size=40))
def test_random_kmsg_records_through_the_assembler(raws: list[bytes]) -> None:
    assembler = ReportAssembler()
    incidents: list[Incident] = []
    prefixes = [b"6,1,1,-;", b"3,2,2,-;", b"4,3,3,c;"]
    for index, raw in enumerate(raws):
        record = parse_kmsg_record(prefixes[index % 3] + raw)
        if record is not None:
            incidents += assembler.feed(record)
    _sane(incidents + assembler.flush())


@SETTINGS
@given(st.lists(st.text(max_size=300), max_size=40))
def test_random_messages_through_the_assembler(messages: list[str]) -> None:
    assembler = ReportAssembler()
    incidents: list[Incident] = []
    for message in messages:
        incidents += assembler.feed(LogRecord(message, "plain"))
    _sane(incidents + assembler.flush())


def test_megabyte_lines_are_read_only_as_far_as_a_kernel_record_goes() -> None:
    """A hostile megabyte line full of anchor text neither raises nor costs more than its
    first `MAX_MESSAGE_CHARS`: it decodes exactly as that prefix does (a bound on the work
    whatever the machine's load; `bench/fuzz.py hostile` times it)."""
    result = decode_text("\n".join(MEGABYTE_LINES))
    _sane(result.incidents)
    assert any("longer than any kernel record" in w for w in result.warnings)
    for line in MEGABYTE_LINES:
        whole, prefix = decode_text(line), decode_text(line[:MAX_MESSAGE_CHARS])
        assert [i.to_dict() for i in whole.incidents] == [i.to_dict() for i in prefix.incidents]
        assert [w for w in whole.warnings if "longer than any kernel record" not in w] == (
            prefix.warnings
        )


def test_huge_numbers_and_whitespace_runs() -> None:
    """Numbers past 64 bits (int() would refuse 4300+ digits) and long blank runs."""
    for line in huge_number_lines():
        _sane(decode_lines([HUGE_NUMBER_HEADER, line]).incidents)
        _sane(decode_text(line).incidents)
