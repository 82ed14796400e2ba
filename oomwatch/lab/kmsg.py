"""Read what the kernel prints while a lab scenario runs, and respect its OOM rate limit."""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Callable
from types import TracebackType

from oomwatch.lab.memcg import KMSG_PATH

_READ_BYTES = 8192
# mm/oom_kill.c: DEFINE_RATELIMIT_STATE(oom_rs, DEFAULT_RATELIMIT_INTERVAL (5 s), BURST 10).
RATE_LIMIT_INTERVAL_S = 5.0
RATE_LIMIT_BURST = 10
_HEADER = b"invoked oom-killer:"


class KmsgTail:
    """/dev/kmsg opened at its end: collects the records printed from now on."""

    def __init__(self, path: str = KMSG_PATH) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(self._fd, 0, os.SEEK_END)
        self.records: list[bytes] = []
        self.lost = 0  # reads that hit EPIPE: records overwritten before we read them

    def __enter__(self) -> KmsgTail:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _read_available(self) -> list[bytes]:
        got: list[bytes] = []
        while True:
            try:
                got.append(os.read(self._fd, _READ_BYTES))
            except BlockingIOError:
                return got
            except OSError as exc:
                if exc.errno != errno.EPIPE:
                    raise
                self.lost += 1

    def collect(
        self,
        until: Callable[[bytes], bool] | None = None,
        timeout_s: float = 5.0,
        settle_s: float = 0.2,
    ) -> list[bytes]:
        """Read records until one satisfies `until` (then `settle_s` more) or the timeout.

        Returns the records read by this call (all of them, also kept in `records`); with
        no predicate it reads for the whole timeout.
        """
        start = len(self.records)
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready, _, _ = select.select([self._fd], [], [], remaining)
            if not ready:
                continue
            fresh = self._read_available()
            self.records.extend(fresh)
            if until is not None and any(until(record) for record in fresh):
                deadline = min(deadline, time.monotonic() + settle_s)
                until = None
        return self.records[start:]


def kmsg_message(record: bytes) -> str:
    """The text of a raw record: after the `prio,seq,usec,flags;` prefix, up to the first
    newline (continuation `KEY=value` lines dropped); `\\xNN` escapes left as printed."""
    _, _, rest = record.partition(b";")
    return rest.split(b"\n", 1)[0].decode(errors="replace")


def _backlog(path: str) -> list[bytes]:
    """Every record now in the kernel's ring (records lost while reading are skipped)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    records: list[bytes] = []
    try:
        while True:
            try:
                records.append(os.read(fd, _READ_BYTES))
            except BlockingIOError:
                return records
            except OSError as exc:
                if exc.errno != errno.EPIPE:
                    raise
    finally:
        os.close(fd)


def count_recent_headers(records: list[bytes], now_us: float, window_s: float) -> int:
    """How many OOM report headers among raw kmsg records are younger than `window_s`."""
    count = 0
    for record in records:
        if _HEADER not in record:
            continue
        fields = record.split(b";", 1)[0].split(b",")
        if len(fields) >= 3 and fields[2].isdigit():
            count += now_us - int(fields[2]) < window_s * 1e6
    return count


def recent_headers(window_s: float, path: str = KMSG_PATH) -> int:
    """OOM report headers the kernel printed in the last `window_s` (any process's)."""
    # kmsg timestamps are local_clock(), which tracks CLOCK_MONOTONIC.
    now_us = time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6
    return count_recent_headers(_backlog(path), now_us, window_s)


def wait_rate_limit_window(
    needed: int = 1, max_wait_s: float = 6.0, path: str = KMSG_PATH
) -> float:
    """Wait until `needed` more kills should get full reports; returns seconds waited.

    The kernel prints at most 10 report headers per 5 s for the whole machine and other
    processes may be causing kills too, so this counts the headers of the last interval in
    the log and waits while fewer than `needed` (plus a margin of 2) are left, at most
    `max_wait_s`.  Not a guarantee -- a racing kill can still take the slot; retry once.
    """
    started = time.monotonic()
    free_needed = min(needed + 2, RATE_LIMIT_BURST)
    while time.monotonic() - started < max_wait_s:
        used = recent_headers(RATE_LIMIT_INTERVAL_S + 0.5, path)
        if RATE_LIMIT_BURST - used >= free_needed:
            break
        time.sleep(0.25)
    return time.monotonic() - started
