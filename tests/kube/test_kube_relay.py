"""The kmsg relay: records cross a FIFO whole, survive a reader restart, and real ones flow."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from oomwatch.kmsg_relay import ensure_fifo, read_records, relay

RECORDS = [
    b"6,101,5000,-;first message\n",
    b"3,102,6000,-;Memory cgroup out of memory: Killed process 42 (a\\x0a) total-vm:1kB\n"
    b" SUBSYSTEM=memory\n",
    b"4,103,7000,c;third\n",
]


def read_all(fifo: str, count_bytes: int) -> bytes:
    with open(fifo, "rb") as f:
        data = b""
        while len(data) < count_bytes:
            chunk = f.read(count_bytes - len(data))
            if not chunk:
                break
            data += chunk
        return data


def test_records_reach_the_reader_unchanged(tmp_path: Path) -> None:
    fifo = str(tmp_path / "kmsg.fifo")
    ensure_fifo(fifo)
    ensure_fifo(fifo)  # idempotent
    assert oct(os.stat(fifo).st_mode & 0o777) == "0o666"  # the agent opens it read-write
    total = sum(len(r) for r in RECORDS)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(read_all(fifo, total)))
    reader.start()
    relay(iter(RECORDS), fifo)
    reader.join(5)
    assert got == [b"".join(RECORDS)]


def test_a_restarted_reader_gets_the_record_that_failed(tmp_path: Path) -> None:
    fifo = str(tmp_path / "kmsg.fifo")
    ensure_fifo(fifo)
    first = threading.Event()

    def records() -> Iterator[bytes]:
        yield RECORDS[0]
        first.wait(5)  # the first reader has gone: the next write gets EPIPE
        yield RECORDS[1]
        yield RECORDS[2]

    got: list[bytes] = []

    def readers() -> None:
        got.append(read_all(fifo, len(RECORDS[0])))  # reads one record, then closes
        first.set()
        got.append(read_all(fifo, len(RECORDS[1]) + len(RECORDS[2])))

    thread = threading.Thread(target=readers)
    thread.start()
    relay(records(), fifo)
    thread.join(5)
    assert got == [RECORDS[0], RECORDS[1] + RECORDS[2]]


def test_existing_non_fifo_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain"
    path.write_text("x")
    with pytest.raises(SystemExit, match="not a FIFO"):
        ensure_fifo(str(path))


@pytest.mark.kernel
def test_real_kmsg_records_are_read_one_per_record() -> None:
    if os.geteuid() != 0 or not os.access("/dev/kmsg", os.R_OK | os.W_OK):
        pytest.skip("needs root and a readable, writable /dev/kmsg")
    marker = f"oomwatch-relay-test-{os.getpid()}"
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        os.lseek(fd, 0, os.SEEK_END)
        with open("/dev/kmsg", "w") as kmsg:
            kmsg.write(f"<6>{marker}\n")
        os.set_blocking(fd, True)
        lost: list[int] = []
        for record in read_records(fd, lambda: lost.append(1)):
            if marker.encode() in record:
                assert record.startswith(b"14,") or record.startswith(b"6,")  # prio,seq,...
                assert record.endswith(f";{marker}\n".encode())
                break
    finally:
        os.close(fd)
