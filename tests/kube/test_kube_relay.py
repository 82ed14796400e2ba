"""The kmsg relay: records cross a FIFO whole, survive a reader restart, and real ones flow."""

from __future__ import annotations

import os
import select
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


def test_records_reach_the_reader_unchanged(tmp_path: Path) -> None:
    fifo = str(tmp_path / "kmsg.fifo")
    ensure_fifo(fifo)
    ensure_fifo(fifo)  # idempotent
    assert oct(os.stat(fifo).st_mode & 0o777) == "0o666"  # the agent opens it read-write
    # The reader end is open before the relay writes, as the agent's is: a pipe that no end
    # holds open frees its records (a reader thread racing the relay lost them under load).
    reader = _open_reader(fifo)
    try:
        relay(iter(RECORDS), fifo)
        assert _read_exactly(reader, sum(len(r) for r in RECORDS)) == b"".join(RECORDS)
    finally:
        os.close(reader)


def _read_exactly(fd: int, count_bytes: int, timeout_s: float = 5.0) -> bytes:
    """Exactly `count_bytes` from a FIFO (fewer if nothing more comes within the timeout)."""
    data = b""
    while len(data) < count_bytes:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        chunk = os.read(fd, count_bytes - len(data)) if ready else b""
        if not chunk:
            break
        data += chunk
    return data


def _open_reader(fifo: str) -> int:
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # as the agent: never waits for a writer
    os.set_blocking(fd, True)
    return fd


def test_records_in_the_pipe_survive_a_reader_restart(tmp_path: Path) -> None:
    """The agent reads one record and restarts: the unread ones, and those relayed while it
    was away, all reach the next reader (a write-only relay dropped them with the pipe)."""
    fifo = str(tmp_path / "kmsg.fifo")
    ensure_fifo(fifo)
    three_written, reader_gone, fourth_written, done = (threading.Event() for _ in range(4))
    fourth = b"6,104,8000,-;relayed while the agent restarts\n"

    def records() -> Iterator[bytes]:
        yield from RECORDS
        three_written.set()
        reader_gone.wait(5)
        yield fourth
        fourth_written.set()
        done.wait(5)  # keep the relay's end open until the test has read

    reader = _open_reader(fifo)
    thread = threading.Thread(target=relay, args=(records(), fifo))
    thread.start()
    try:
        assert three_written.wait(5)
        assert _read_exactly(reader, len(RECORDS[0])) == RECORDS[0]
        os.close(reader)  # the agent restarts with two records unread in the pipe
        reader_gone.set()
        assert fourth_written.wait(5), "the relay blocked while no agent was reading"
        reader = _open_reader(fifo)
        rest = RECORDS[1] + RECORDS[2] + fourth
        assert _read_exactly(reader, len(rest)) == rest
        os.close(reader)
    finally:
        done.set()
        thread.join(5)
    assert not thread.is_alive()


def test_existing_non_fifo_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain"
    path.write_text("x")
    with pytest.raises(SystemExit, match="not a FIFO"):
        ensure_fifo(str(path))


@pytest.mark.kernel
@pytest.mark.any_kernel  # the kernel's log format, on the host and each lab VM kernel
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
