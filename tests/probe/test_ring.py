"""The ring format: round trip, wrap-around, torn slots, and the checks the reader relies on."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.probe_records import META, sample, write_record

from oomwatch.probe.reader import parse_flight_record
from oomwatch.probe.ring import HEADER_BYTES, RingFormatError, RingGeometry


def test_round_trip(probe_dir: Path) -> None:
    path = write_record(probe_dir)
    record = parse_flight_record(path.name, path.read_bytes(), 0.0)
    assert record.meta == META
    assert [s.seq for s in record.samples] == [1, 2, 3, 4, 5]
    assert record.samples[-1].step == 4 and record.samples[-1].rss_bytes == 100 << 20
    assert record.events == ()


def test_ring_keeps_the_newest_slots(probe_dir: Path) -> None:
    path = write_record(
        probe_dir,
        samples=[sample(i) for i in range(11)],
        geometry=RingGeometry(slot_bytes=1024, sample_slots=4, event_slots=1),
    )
    record = parse_flight_record(path.name, path.read_bytes(), 0.0)
    assert [s.seq for s in record.samples] == [8, 9, 10, 11]
    assert [s.step for s in record.samples] == [7, 8, 9, 10]


def test_a_torn_slot_is_skipped_and_the_rest_survive(probe_dir: Path) -> None:
    geometry = RingGeometry(slot_bytes=1024, sample_slots=4, event_slots=1)
    path = write_record(probe_dir, samples=[sample(i) for i in range(6)], geometry=geometry)
    data = bytearray(path.read_bytes())
    newest = geometry.sample_offset(6)
    data[newest + 40 : newest + 60] = b"\xff" * 20  # a write cut short: payload half new
    record = parse_flight_record(path.name, bytes(data), 0.0)
    assert [s.seq for s in record.samples] == [3, 4, 5]


def test_a_slot_in_the_wrong_place_refuses_the_file(probe_dir: Path) -> None:
    geometry = RingGeometry(slot_bytes=1024, sample_slots=4, event_slots=1)
    path = write_record(probe_dir, samples=[sample(i) for i in range(2)], geometry=geometry)
    data = bytearray(path.read_bytes())
    first = data[HEADER_BYTES : HEADER_BYTES + 1024]
    data[HEADER_BYTES + 2048 : HEADER_BYTES + 3072] = first  # seq 1 copied into slot 2
    with pytest.raises(RingFormatError, match="belongs elsewhere"):
        parse_flight_record(path.name, bytes(data), 0.0)


def test_header_is_checked(probe_dir: Path) -> None:
    data = write_record(probe_dir).read_bytes()
    with pytest.raises(RingFormatError, match="bad magic"):
        parse_flight_record("x.ring", b"NOTMAGIC" + data[8:], 0.0)
    with pytest.raises(RingFormatError, match="size"):
        parse_flight_record("x.ring", data[: len(data) // 2], 0.0)
    corrupt = bytearray(data)
    corrupt[40] ^= 0x01  # inside the metadata JSON
    with pytest.raises(RingFormatError, match="metadata checksum"):
        parse_flight_record("x.ring", bytes(corrupt), 0.0)
