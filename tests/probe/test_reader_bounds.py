"""The reader's bounds: what a hostile pod's files cost, and what they cannot do.

Each test measures its bound: memory held (tracemalloc), opens of a device (inotify), walks
until a real file is read behind junk, and that one bad file refuses only itself.
"""

from __future__ import annotations

import logging
import os
import stat
import struct
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
from support.clock import FakeClock
from support.probe_records import META, EntryCount, refusals, write_record

from oomwatch.cgroups.inotify import IN_OPEN, Inotify
from oomwatch.probe import reader as reader_module
from oomwatch.probe.reader import (
    EVENT_COST_BYTES,
    SAMPLE_COST_BYTES,
    ProbeDirReader,
    ReaderLimits,
    parse_flight_record,
)
from oomwatch.probe.ring import HEADER_BYTES, RingGeometry, encode_header, encode_slot
from oomwatch.probe.schema import CUDA_KEYS, to_payload

FULL = RingGeometry(slot_bytes=2048, sample_slots=495, event_slots=16)  # 1,047,552 bytes


def largest_sample(i: int) -> dict[str, Any]:
    """A sample with every field the schema allows, strings at their longest."""
    counts = [k for k in CUDA_KEYS if k != "device"]
    return {
        "wall_s": time.time() - 1,
        "mono_s": 1000.0 + i,
        "rss_bytes": 1 << 30,
        "uss_bytes": 1 << 29,
        "anon_bytes": 1 << 29,
        "anon_huge_bytes": 1 << 20,
        "shmem_bytes": 1 << 20,
        "swap_bytes": 0,
        "phase": "p" * 128,
        "epoch": 3,
        "step": i,
        "batch_size": 256,
        "cuda": {"device": "cuda:0", **{k: i + 1 for k in counts}},
        "tf": {"device": "GPU:0" + "x" * 100, "current_bytes": i, "peak_bytes": i},
    }


def largest_event(i: int) -> dict[str, Any]:
    return {
        "wall_s": time.time() - 1,
        "mono_s": 1000.0 + i,
        "framework": "torch-cuda",
        "message": "m" * 1200,
        "device": "cuda:0",
        "requested_bytes": 1 << 30,
        "free_bytes": 1,
        "total_bytes": 2,
        "allocated_bytes": 3,
        "reserved_unallocated_bytes": 4,
        "phase": "p" * 128,
        "epoch": 1,
        "step": i,
        "batch_size": 8,
    }


def image(
    geometry: RingGeometry, samples: int, events: int, raw: dict[int, bytes] | None = None
) -> bytes:
    data = bytearray(geometry.file_bytes)
    data[:HEADER_BYTES] = encode_header(geometry, to_payload(META))
    for seq in range(1, samples + 1):
        at = geometry.sample_offset(seq)
        data[at : at + geometry.slot_bytes] = encode_slot(seq, largest_sample(seq), 2048)
    for seq in range(1, events + 1):
        at = geometry.event_offset(seq)
        data[at : at + geometry.slot_bytes] = encode_slot(seq, largest_event(seq), 2048)
    for seq, body in (raw or {}).items():  # arbitrary payload bytes behind a valid CRC
        crc = zlib.crc32(struct.pack("<QI", seq, len(body)) + body)
        slot = (struct.pack("<QII", seq, len(body), crc) + body).ljust(geometry.slot_bytes, b"\0")
        at = geometry.sample_offset(seq)
        data[at : at + geometry.slot_bytes] = slot
    return bytes(data)


def test_110_full_files_are_held_under_one_budget(probe_dir: Path) -> None:
    """110 valid 1 MB files are held under one byte budget, not each in full (they once took
    the agent to 276 MB RSS against its 192 MiB limit)."""
    one = image(FULL, FULL.sample_slots, FULL.event_slots)
    for i in range(110):
        (probe_dir / f"t{i}.ring").write_bytes(one)
    reader = ProbeDirReader(probe_dir, ReaderLimits(max_walk_s=60.0))
    tracemalloc.start()
    try:
        records = reader.read_all()
        held_bytes, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(records) == 110
    budget = ReaderLimits().budget_bytes
    assert reader.kept_bytes <= budget + 110 * (2048 + SAMPLE_COST_BYTES + EVENT_COST_BYTES)
    assert held_bytes < 24 << 20, held_bytes  # measured 16.2 MiB: the 16 MiB budget
    assert peak_bytes < 32 << 20, peak_bytes  # one file's bytes at a time, not all of them
    full = [r for r in records if len(r.samples) == ReaderLimits().keep_samples]
    assert full and all(len(r.events) == 16 for r in full)  # until the budget was spent
    assert all(len(r.samples) >= 1 for r in records)  # then the newest sample and event
    assert [s.seq for s in full[0].samples][-1] == FULL.sample_slots  # the newest are kept


def test_the_cost_estimates_bound_what_records_really_hold(probe_dir: Path) -> None:
    (probe_dir / "big.ring").write_bytes(image(FULL, FULL.sample_slots, FULL.event_slots))
    data = (probe_dir / "big.ring").read_bytes()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        record = parse_flight_record("big.ring", data, 0.0, keep_samples=128, keep_events=16)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert (len(record.samples), len(record.events)) == (128, 16)
    assert held <= 128 * SAMPLE_COST_BYTES + 16 * EVENT_COST_BYTES, held


def test_a_nesting_bomb_refuses_its_file_and_nothing_else(
    probe_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A JSON nesting bomb (1.3 KB of `[`) refuses its file alone; no RecursionError escapes
    the reader."""
    geometry = RingGeometry(slot_bytes=2048, sample_slots=4, event_slots=1)
    (probe_dir / "bomb.ring").write_bytes(image(geometry, 0, 0, raw={1: b"[" * 1300}))
    (probe_dir / "objects.ring").write_bytes(image(geometry, 0, 0, raw={1: b'{"a":' * 300}))
    write_record(probe_dir, "good.ring")
    with caplog.at_level(logging.WARNING):
        records = ProbeDirReader(probe_dir).read_all()
    assert [r.name for r in records] == ["good.ring"]
    refused = refusals(caplog)
    assert "1300 brackets" in refused["bomb.ring"] and "brackets" in refused["objects.ring"]


def test_any_failure_on_one_file_refuses_that_file_only(
    probe_dir: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_record(probe_dir, "a.ring")
    write_record(probe_dir, "b.ring")
    real = reader_module.parse_flight_record

    def flaky(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "a.ring":
            raise KeyError("something nobody foresaw")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(reader_module, "parse_flight_record", flaky)
    with caplog.at_level(logging.WARNING):
        records = ProbeDirReader(probe_dir).read_all()
    assert [r.name for r in records] == ["b.ring"]
    assert "unexpected KeyError" in refusals(caplog)["a.ring"]


def opens_of(directory: Path, name: str, action: Any) -> int:
    """How often `action()` makes the kernel open `directory/name` (inotify IN_OPEN)."""
    watch = Inotify()
    try:
        watch.add_watch(directory, IN_OPEN)
        action()  # the kernel queues IN_OPEN before open(2) returns
        return sum(e.name == name for e in watch.read())
    finally:
        watch.close()


def test_a_device_node_is_never_opened(probe_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A device node named x.ring is refused by its type before anything opens it."""
    os.mknod(probe_dir / "x.ring", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null
    reader = ProbeDirReader(probe_dir)
    with caplog.at_level(logging.WARNING):
        assert opens_of(probe_dir, "x.ring", reader.read_all) == 0
    assert refusals(caplog)["x.ring"] == "not a regular file"


def test_a_file_swapped_for_a_device_after_the_check_is_not_opened(
    probe_dir: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_record(probe_dir, "x.ring")
    real_open = os.open

    def swap_then_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "x.ring" and flags & os.O_PATH:  # after fstatat, before the open
            os.mknod(probe_dir / "dev", stat.S_IFCHR | 0o666, os.makedev(1, 3))
            os.replace(probe_dir / "dev", probe_dir / "x.ring")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    reader = ProbeDirReader(probe_dir)
    with caplog.at_level(logging.WARNING):
        assert opens_of(probe_dir, "x.ring", reader.read_all) == 0
    assert refusals(caplog)["x.ring"] == "replaced while being opened"


def test_junk_delays_a_real_file_by_a_few_walks_only(
    probe_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind 5,000 junk entries (more than a walk looks at) a real trainer's file is still
    read, a few walks later, and no walk looks at more than its share of the listing."""
    write_record(probe_dir, "trainer.ring")
    for i in range(5000):
        (probe_dir / f"junk-{i}").write_bytes(b"")
    for i in range(1500):
        (probe_dir / f"junk-{i}.ring").write_bytes(b"x")
    limits = ReaderLimits()
    # each look at the clock is 0.2 ms: the 0.25 s deadline is 1,250 looks, whatever the load
    reader = ProbeDirReader(probe_dir, limits, clock=FakeClock(tick_s=0.0002))
    listed = EntryCount().install(monkeypatch)
    read_entry, tried = reader._read_entry, 0

    def counted(*args: Any) -> Any:
        nonlocal tried
        tried += 1
        return read_entry(*args)

    monkeypatch.setattr(reader, "_read_entry", counted)
    walks, work = 0, []
    while walks < 20:
        walks += 1
        names = [r.name for r in reader.read_all()]
        work.append((listed.take(), tried))
        tried = 0
        if "trainer.ring" in names:
            break
    # 6,501 entries, 4,096 a walk (1,024 flight-record names at most): a handful of walks,
    # each listing the directory once at most and reading no more than `max_files` files
    # (fewer: the deadline cuts them)
    assert "trainer.ring" in names and walks <= 6, (walks, work)
    assert all(entries <= 6501 and files <= limits.max_files for entries, files in work), work
    for _ in range(8):  # and it stays seen while the walk goes round the junk
        assert "trainer.ring" in [r.name for r in reader.read_all()]
