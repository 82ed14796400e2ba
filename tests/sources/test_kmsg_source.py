"""The kmsg source: record splitting, cursor resume, loss counting, and the real /dev/kmsg."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oomwatch.sources.kmsg import (
    KmsgCursor,
    KmsgError,
    KmsgFollower,
    RecordSplitter,
    read_backlog,
    record_seq,
)

BOOT = "11111111-2222-3333-4444-555555555555"


def rec(seq: int, text: str, prio: int = 3) -> bytes:
    return f"{prio},{seq},{seq * 1000},-;{text}\n".encode()


def test_record_seq() -> None:
    assert record_seq(rec(42, "x")) == 42
    assert record_seq(b"6,7,8,-,caller=T1;a;b\n") == 7
    assert record_seq(b"garbage") is None
    assert record_seq(b"x,y,z;text\n") is None


def test_splitter_keeps_dictionary_lines_and_partial_records() -> None:
    splitter = RecordSplitter()
    first = rec(1, "pci 0000:00 hello") + b" SUBSYSTEM=pci\n DEVICE=+pci:0000\n"
    out = splitter.feed(first + rec(2, "two")[:5])
    assert out == [first]
    assert splitter.feed(rec(2, "two")[5:]) == [rec(2, "two")]


def test_backlog_from_saved_file(tmp_path: Path) -> None:
    saved = tmp_path / "ring.txt"
    saved.write_bytes(rec(1, "a") + rec(2, "b") + b" K=V\n" + rec(3, "c"))
    assert [record_seq(r) for r in read_backlog(str(saved))] == [1, 2, 3]


def fifo_with(tmp_path: Path, data: bytes) -> tuple[str, int]:
    path = str(tmp_path / "kmsg.fifo")
    os.mkfifo(path)
    writer = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    os.write(writer, data)
    return path, writer


def test_follower_resumes_after_cursor_and_counts_gaps(tmp_path: Path) -> None:
    path, writer = fifo_with(tmp_path, b"".join(rec(s, f"m{s}") for s in (5, 6, 7, 10, 11)))
    try:
        follower = KmsgFollower(path, KmsgCursor(BOOT, 6), boot_id=BOOT)
        got = follower.read_available()
        assert [seq for seq, _ in got] == [7, 10, 11]
        assert follower.stats.records_lost == 2 and follower.take_lost() == 2
        assert follower.take_lost() == 0
        assert follower.cursor == KmsgCursor(BOOT, 11)
        assert follower.read_available() == []  # nothing more: no blocking, no hang-up
        follower.close()
    finally:
        os.close(writer)


def test_cursor_of_another_boot_reads_everything(tmp_path: Path) -> None:
    path, writer = fifo_with(tmp_path, rec(0, "a") + rec(1, "b"))
    try:
        follower = KmsgFollower(path, KmsgCursor("other-boot", 99), boot_id=BOOT)
        assert [seq for seq, _ in follower.read_available()] == [0, 1]
        follower.close()
    finally:
        os.close(writer)


def test_regular_file_is_refused_by_the_follower(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(rec(1, "a"))
    with pytest.raises(KmsgError, match="plain"):
        KmsgFollower(str(plain), None, boot_id=BOOT)


def _kmsg_readable() -> str | None:
    try:
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
    except OSError as exc:
        return f"/dev/kmsg not readable: {exc.strerror}"
    return None


@pytest.mark.kernel
@pytest.mark.any_kernel  # the kernel's log format, on the host and each lab VM kernel
def test_real_kmsg_backlog_then_follow_a_written_record() -> None:
    reason = _kmsg_readable()
    if reason:
        pytest.skip(reason)
    backlog = list(read_backlog())
    assert backlog and all(record_seq(r) is not None for r in backlog)
    follower = KmsgFollower()
    first = follower.read_available(limit=1_000_000)
    assert first, "the first start reads the backlog"
    cursor = follower.cursor
    assert cursor is not None
    marker = f"oomwatch-test-{os.getpid()}"
    with open("/dev/kmsg", "w") as kmsg:
        kmsg.write(marker + "\n")
    new = follower.read_available()
    assert any(marker.encode() in raw for _, raw in new)
    assert all(seq > cursor.seq for seq, _ in new)
    follower.close()
    # a restart with the cursor skips what was read
    last = follower.cursor
    assert last is not None
    again = KmsgFollower(cursor=last)
    assert all(seq > last.seq for seq, _ in again.read_available())
    again.close()
