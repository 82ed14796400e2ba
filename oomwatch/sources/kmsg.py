"""Reading /dev/kmsg: the one-shot backlog and the daemon's poll-driven follower.

Each read() of /dev/kmsg returns exactly one record; a record longer than our buffer would
fail with EINVAL, so the buffer is the kernel's largest record (8 KiB).  When the ring
overwrites records we have not read, the next read() raises EPIPE and moves on: that is
counted (the sequence-number gap says how many were lost), never fatal.  Decoding the
records is the decoder's job; this module only moves bytes and keeps the cursor.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

KMSG_PATH = "/dev/kmsg"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
RECORD_MAX_BYTES = 8192
MAX_RECORDS_PER_READ = 4096  # bound one poll turn so timers and inotify still get served


class KmsgError(Exception):
    """The kernel log source cannot be followed (names the path)."""


@dataclass(frozen=True, slots=True)
class KmsgCursor:
    """Where we stopped: the boot (sequence numbers restart at 0 each boot) and last seq read."""

    boot_id: str
    seq: int


@dataclass(slots=True)
class KmsgStats:
    """What went wrong while reading: overruns (EPIPE) and the records they cost."""

    overruns: int = 0
    records_lost: int = 0
    unreadable: int = 0  # records without a parsable header (skipped)


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    """This boot's id; kmsg sequence numbers are only meaningful together with it."""
    return Path(path).read_text(encoding="ascii").strip()


def record_seq(raw: bytes) -> int | None:
    """The sequence number from a record's `prio,seq,ts,flags;` header (None if malformed)."""
    header, sep, _ = raw.partition(b";")
    if not sep:
        return None
    fields = header.split(b",")
    if len(fields) < 3:
        return None
    try:
        return int(fields[1])
    except ValueError:
        return None


def _open_nonblocking(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)


def _open_stream(path: str) -> int:
    """A FIFO (from `oomwatch.kmsg_relay`) opens read-write: we are then always one of its
    writers, so poll() never reports a hang-up while the relay restarts."""
    return os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)


class RecordSplitter:
    """Cuts a byte stream of kmsg records (FIFO, saved ring) into whole records.

    A record is a line that does not start with a space plus the dictionary lines (leading
    space) after it; the kernel escapes newlines inside messages, so that is unambiguous.
    The relay writes each record whole, so a chunk that ends in a newline ends a record.
    """

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._pending + chunk
        cut = data.rfind(b"\n") + 1
        self._pending = data[cut:][-RECORD_MAX_BYTES:]  # a garbage line cannot grow forever
        records: list[bytes] = []
        for line in data[:cut].splitlines(keepends=True):
            if line.startswith(b" ") and records:
                records[-1] += line
            elif line.strip():
                records.append(line)
        return records


def _read_record(fd: int, stats: KmsgStats) -> bytes | None:
    """One record, or None when nothing is left (EAGAIN, or end of a regular file)."""
    while True:
        try:
            data = os.read(fd, RECORD_MAX_BYTES)
        except BrokenPipeError:
            stats.overruns += 1  # the kernel moved our position to the oldest record left
            continue
        except BlockingIOError:
            return None
        return data or None


def read_backlog(path: str = KMSG_PATH, stats: KmsgStats | None = None) -> Iterator[bytes]:
    """Every record now in the kernel ring, oldest first, without blocking.

    Overruns while reading are counted in `stats` (when given) and skipped.  A regular file
    of newline-separated records (a saved ring, a test fixture) reads the same way.
    """
    stats = stats if stats is not None else KmsgStats()
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            yield from RecordSplitter().feed(fh.read().rstrip(b"\n") + b"\n")
        return
    fd = _open_nonblocking(path)
    try:
        last: int | None = None
        while (raw := _read_record(fd, stats)) is not None:
            seq = record_seq(raw)
            if seq is not None and last is not None and seq > last + 1:
                stats.records_lost += seq - last - 1
            last = seq if seq is not None else last
            yield raw
    finally:
        os.close(fd)


class KmsgFollower:
    """Follows the live kernel log from a cursor; the daemon polls `fileno()` for input.

    With no cursor (first start) or a cursor from another boot, it starts at the oldest
    record in the ring, so the backlog is decoded once; with a cursor of this boot it skips
    what was already read and counts the records overwritten while we were away as lost.
    """

    def __init__(
        self,
        path: str = KMSG_PATH,
        cursor: KmsgCursor | None = None,
        boot_id: str | None = None,
    ) -> None:
        self.path = path
        self.boot_id = boot_id if boot_id is not None else read_boot_id()
        self.stats = KmsgStats()
        resume = cursor is not None and cursor.boot_id == self.boot_id
        self._last_seq: int | None = cursor.seq if resume and cursor is not None else None
        self._splitter: RecordSplitter | None = None
        mode = os.stat(path).st_mode
        if stat.S_ISCHR(mode):
            self._fd: int | None = _open_nonblocking(path)
        elif stat.S_ISFIFO(mode):
            self._fd = _open_stream(path)
            self._splitter = RecordSplitter()
        else:
            raise KmsgError(f"{path}: not /dev/kmsg or a FIFO from the kmsg relay")
        self._lost_reported = 0

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError("KmsgFollower is closed")
        return self._fd

    @property
    def cursor(self) -> KmsgCursor | None:
        """The position after the last record read (None before the first record)."""
        if self._last_seq is None:
            return None
        return KmsgCursor(self.boot_id, self._last_seq)

    def read_available(self, limit: int = MAX_RECORDS_PER_READ) -> list[tuple[int, bytes]]:
        """New records as (seq, raw), oldest first; userspace records are included.

        The caller filters by facility (the decoder does); the cursor advances past every
        record returned, whatever its facility, so a restart resumes exactly here.
        """
        fd = self.fileno()
        out: list[tuple[int, bytes]] = []
        for raw in self._raw_records(fd, limit):
            seq = record_seq(raw)
            if seq is None:
                self.stats.unreadable += 1
                continue
            if self._last_seq is not None:
                if seq <= self._last_seq:
                    continue  # already read before a restart
                if seq > self._last_seq + 1:
                    self.stats.records_lost += seq - self._last_seq - 1
            self._last_seq = seq
            out.append((seq, raw))
        return out

    def _raw_records(self, fd: int, limit: int) -> Iterator[bytes]:
        for _ in range(limit):
            raw = _read_record(fd, self.stats)
            if raw is None:
                return
            if self._splitter is None:
                yield raw
            else:
                yield from self._splitter.feed(raw)

    def take_lost(self) -> int:
        """Records lost since the last call (for a counter that only goes up)."""
        new = self.stats.records_lost - self._lost_reported
        self._lost_reported = self.stats.records_lost
        return new

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
