"""The daemon's reader against files a hostile pod could put in the shared directory."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest
from support.probe_records import META, refusals, sample, write_record

from oomwatch.probe.reader import ProbeDirReader, ProbeFileError, ReaderLimits
from oomwatch.probe.ring import HEADER_BYTES, RingGeometry, encode_header, encode_slot
from oomwatch.probe.schema import to_payload


def _image_with(payload_edit: dict[str, object]) -> bytes:
    """A well-formed file whose one sample carries `payload_edit` (valid CRC, bad content)."""
    geometry = RingGeometry(slot_bytes=1024, sample_slots=2, event_slots=1)
    data = bytearray(geometry.file_bytes)
    data[:HEADER_BYTES] = encode_header(geometry, to_payload(META))
    payload = {**to_payload(sample(0)), **payload_edit}
    data[HEADER_BYTES : HEADER_BYTES + 1024] = encode_slot(1, payload, 1024)
    return bytes(data)


def test_hostile_files_are_refused_with_a_log_line_and_the_good_one_is_read(
    probe_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_record(probe_dir, "good.trainer.ring")
    host_secret = probe_dir.parent / "shadow"
    host_secret.write_bytes(write_record(probe_dir, "tmp.ring").read_bytes())
    (probe_dir / "tmp.ring").unlink()
    (probe_dir / "symlink.ring").symlink_to(host_secret)  # a valid image, behind a symlink
    with open(probe_dir / "sparse.ring", "wb") as f:
        f.truncate(10 << 30)  # 10 GiB, no blocks
    (probe_dir / "garbage.ring").write_bytes(os.urandom(300_000))
    good = (probe_dir / "good.trainer.ring").read_bytes()
    (probe_dir / "truncated.ring").write_bytes(good[: len(good) - 1000])
    (probe_dir / "tiny.ring").write_bytes(good[:100])
    (probe_dir / "owner.ring").write_bytes(good)
    os.chown(probe_dir / "owner.ring", 65534, 65534)
    os.mkfifo(probe_dir / "fifo.ring")  # O_NONBLOCK: must not hang the daemon
    os.link(host_secret, probe_dir / "hardlink.ring")
    (probe_dir / "dir.ring").mkdir()
    (probe_dir / "unknown-key.ring").write_bytes(_image_with({"uid": 0}))
    (probe_dir / "negative.ring").write_bytes(_image_with({"rss_bytes": -1}))
    (probe_dir / "huge-phase.ring").write_bytes(_image_with({"phase": "x" * 500}))
    (probe_dir / "type.ring").write_bytes(_image_with({"wall_s": "yesterday"}))
    (probe_dir / "bad\nname\x1b[31m.ring").write_bytes(good)
    (probe_dir / "notes.txt").write_text("ignored: not a flight record")

    reader = ProbeDirReader(probe_dir, ReaderLimits(allowed_uids=(range(0, 1), range(7, 10))))
    with caplog.at_level(logging.WARNING):
        records = reader.read_all()
    assert [r.name for r in records] == ["good.trainer.ring"]
    refused = refusals(caplog)
    assert "not a regular file" in refused["symlink.ring"]  # lstat: never followed
    assert "over the cap" in refused["sparse.ring"]
    assert "bad magic" in refused["garbage.ring"]
    assert "size" in refused["truncated.ring"]
    assert "truncated" in refused["tiny.ring"]
    assert "owner uid 65534" in refused["owner.ring"]
    assert "not a regular file" in refused["fifo.ring"]
    assert "not a regular file" in refused["dir.ring"]
    assert "hard links" in refused["hardlink.ring"]
    assert "unknown keys" in refused["unknown-key.ring"]
    assert "rss_bytes" in refused["negative.ring"]
    assert "phase" in refused["huge-phase.ring"]
    assert "wall_s" in refused["type.ring"]
    assert "bad\\x0aname\\x1b[31m.ring" in refused  # escaped in the log line
    assert "notes.txt" not in refused

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert len(reader.read_all()) == 1
    assert refusals(caplog) == {}  # each bad file is logged once, not every poll
    reader.close()


def test_read_one_names_the_reason(probe_dir: Path) -> None:
    (probe_dir / "garbage.ring").write_bytes(b"\0" * 5000)
    with pytest.raises(ProbeFileError, match="bad magic"):
        ProbeDirReader(probe_dir).read_one("garbage.ring")


def test_stale_and_too_many_files(probe_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_record(probe_dir, "old.trainer.ring")
    old = time.time() - 7200
    os.utime(path, (old, old))
    for i in range(5):
        write_record(probe_dir, f"n{i}.trainer.ring")
    assert [r.name for r in ProbeDirReader(probe_dir).read_all()].count("old.trainer.ring") == 0
    reader = ProbeDirReader(probe_dir, ReaderLimits(max_entries=3))
    with caplog.at_level(logging.WARNING):
        first = reader.read_all()
    assert 2 <= len(first) <= 3  # three entries a walk (one of them maybe the stale file)
    assert any("more than 3 entries" in reason for reason in refusals(caplog).values())
    second = reader.read_all()  # the next window: the other two, and the three kept
    assert sorted(r.name for r in second) == [f"n{i}.trainer.ring" for i in range(5)]


def test_missing_directory_is_not_fatal(tmp_path: Path) -> None:
    reader = ProbeDirReader(tmp_path / "absent")
    assert reader.read_all() == []
    (tmp_path / "absent").mkdir()
    write_record(tmp_path / "absent")
    assert len(reader.read_all()) == 1  # opened once it exists


def test_header_claims_checked_against_size(probe_dir: Path) -> None:
    geometry = RingGeometry(slot_bytes=1024, sample_slots=2, event_slots=1)
    lying = RingGeometry(slot_bytes=1024, sample_slots=4000, event_slots=1)
    data = bytearray(geometry.file_bytes)
    data[:HEADER_BYTES] = encode_header(lying, json.loads(json.dumps(to_payload(META))))
    (probe_dir / "lying.ring").write_bytes(bytes(data))
    with pytest.raises(ProbeFileError, match="header declares"):
        ProbeDirReader(probe_dir).read_one("lying.ring")


def test_idle_files_are_parsed_once_and_changes_are_seen(probe_dir: Path) -> None:
    path = write_record(probe_dir, "idle.trainer.ring")
    old = time.time() - 60
    os.utime(path, (old, old))
    reader = ProbeDirReader(probe_dir)
    first = reader.read_all()
    assert reader.read_all()[0] is first[0]  # unchanged and idle: not parsed again
    write_record(probe_dir, "idle.trainer.ring", samples=[sample(i) for i in range(7)])
    assert len(reader.read_all()[0].samples) == 7  # rewritten: read again
    assert len(reader.read_all()[0].samples) == 7  # still being written to: never cached


def test_a_walk_stops_at_its_deadline_and_the_next_one_goes_on(
    probe_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    names = [f"n{i}.trainer.ring" for i in range(6)]
    for name in names:
        write_record(probe_dir, name)
    ticks = iter(range(1_000_000))  # a clock that advances one second each time it is read
    limits = ReaderLimits(max_walk_s=2.5)
    reader = ProbeDirReader(probe_dir, limits, clock=lambda: float(next(ticks)))
    with caplog.at_level(logging.WARNING):
        first = reader.read_all()
    # deadline t=2.5: n0 is read at once, n1 at t=1, n2 at t=2; at t=3 the time is up
    assert [r.name for r in first] == names[:3]
    assert any("walk over 2.5 s" in reason for reason in refusals(caplog).values())
    second = reader.read_all()  # goes on with n3; n0-n2 count as they were last read
    assert [r.name for r in second] == names[3:] + names[:3]
    assert all(a is b for a, b in zip(second[3:], first, strict=True))
